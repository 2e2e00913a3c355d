"""Loaders for semantic textual similarity (STS) data sets.

:func:`load_sts` reads the common STS file formats (STS-B CSV, SentEval TSV,
sentence-transformers' ``stsbenchmark.tsv.gz``, SemEval STS 2012-2016, SICK)
and can download the STS Benchmark into a local cache. :data:`STS_FORMATS`
lists the names its ``format=`` accepts. :func:`load_beir` reads a retrieval
data set in the BEIR layout (corpus, queries, relevance judgements).
:func:`load_sts_splits` loads the splits an evaluation needs at once, with
one clear error. :func:`load_senteval` reads SentEval's sentence
classification tasks (MR, CR, SUBJ, MPQA, TREC) from SentEval's own folder
layout. :func:`make_cone` generates anisotropic embeddings, the synthetic
data of the tests, benchmarks and examples.
"""

from __future__ import annotations

from . import _sts
from ._beir import load_beir
from ._samples_generator import make_cone
from ._senteval import SENTEVAL_TASKS, load_senteval
from ._splits import load_sts_splits
from ._sts import get_data_home, load_sts

#: The names :func:`load_sts` accepts as ``format=``, as a tuple of str in the
#: order they are documented: ``("stsb-csv", "senteval", "sbert", "semeval",
#: "sick")``. A command line can offer them as ``choices=``.
STS_FORMATS = _sts.STS_FORMATS

__all__ = [
    "SENTEVAL_TASKS",
    "STS_FORMATS",
    "get_data_home",
    "load_beir",
    "load_senteval",
    "load_sts",
    "load_sts_splits",
    "make_cone",
]
