"""embed_partitions: texts in dask collections embedded on a real cluster.

A two-process LocalCluster (``dask_client``, started once for the module):
a stand-in vectorizer counts its model loads per worker, and the tiny BERT's
embeddings equal a single-process run's.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
pytest.importorskip("distributed")

from sklearn_isotropy import StandardNormalizer  # noqa: E402
from sklearn_isotropy.dask import embed_partitions  # noqa: E402

_LOADS = {"count": 0}
_LOADS_LOCK = threading.Lock()


def _load_count():
    return _LOADS["count"]


class LazyModelVectorizer:
    """Stand-in for a model vectorizer: loads its "model" on first transform.

    The model is left out of the pickle, like weights reloaded from disk; the
    loads are counted per process.
    """

    def __init__(self, width=6):
        self.width = width
        self._model = None

    def __sklearn_is_fitted__(self):
        return True

    def __getstate__(self):
        return {"width": self.width, "_model": None}

    def transform(self, texts):
        if self._model is None:
            with _LOADS_LOCK:
                _LOADS["count"] += 1
            self._model = np.arange(1, self.width + 1, dtype=np.float32)
        lengths = np.array([len(t) for t in texts], dtype=np.float32)
        return (
            np.outer(lengths, self._model)
            + np.array([sum(map(ord, t)) % 97 for t in texts], dtype=np.float32)[
                :, None
            ]
        )


def test_embed_partitions_loads_model_once_per_worker(dask_client):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    texts = [f"sentence {i} " + "word " * (i % 7) for i in range(300)]
    ddf = dd.from_pandas(pd.DataFrame({"text": texts}), npartitions=12)
    vec = LazyModelVectorizer()
    dask_client.run(lambda: _LOADS.update(count=0))
    E = embed_partitions(vec, ddf["text"])
    assert isinstance(E, da.Array)
    assert E.shape == (300, 6) and E.dtype == np.float32
    assert not any(np.isnan(c) for c in E.chunks[0])
    assert sum(E.chunks[0]) == 300 and len(E.chunks[0]) == 12
    values = E.compute()
    assert_array_equal(values, LazyModelVectorizer().transform(texts))
    loads = dask_client.run(_load_count)
    assert sum(loads.values()) >= 1
    assert all(n <= 1 for n in loads.values()), loads
    # the embeddings feed a cluster fit directly
    est = StandardNormalizer().fit(E)
    assert_allclose(est.mean_, values.astype(np.float64).mean(axis=0), rtol=1e-6)


def test_embed_partitions_bag_and_errors(dask_client):
    db = pytest.importorskip("dask.bag")
    texts = [f"t{i}" * (1 + i % 3) for i in range(50)]
    bag = db.from_sequence(texts, npartitions=4)
    E = embed_partitions(LazyModelVectorizer(width=3), bag, n_features=3, dtype="f8")
    assert E.dtype == np.float64 and E.shape == (50, 3)
    assert_array_equal(E.compute(), LazyModelVectorizer(width=3).transform(texts))
    with pytest.raises(TypeError, match="dask Series"):
        embed_partitions(LazyModelVectorizer(), texts)
    from sklearn.exceptions import NotFittedError
    from sklearn.feature_extraction.text import TfidfVectorizer

    with pytest.raises(NotFittedError, match="embed_partitions"):
        embed_partitions(TfidfVectorizer(), bag)


def _count_encoder_loads():
    """Install (once) and read a per-process counter of encoder loads."""
    import sklearn_isotropy.text._loading as loading

    cls = loading.LoadedEncoder
    if "_n_loads" not in cls.__dict__:
        original = cls.__init__

        def counting_init(self, *args, **kwargs):
            cls._n_loads += 1
            original(self, *args, **kwargs)

        cls._n_loads = 0
        cls.__init__ = counting_init
    return cls._n_loads


def test_embed_partitions_tiny_bert_matches_single_process(dask_client, tiny_bert):
    pytest.importorskip("torch")
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    from sklearn_isotropy import BertPoolingVectorizer

    words = "the a cat dog sat on mat ran fast slow man woman big small red".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 12))) for i in range(300)]
    frame = pd.DataFrame({"id": np.arange(300), "text": texts})
    ddf = dd.from_pandas(frame, npartitions=6)
    vec = BertPoolingVectorizer(str(tiny_bert), batch_size=16).fit(texts[:2])
    expected = vec.transform(texts)

    before = dask_client.run(_count_encoder_loads)
    # every task on one worker, so that one process, not two, imports torch
    # (the test above spreads its partitions over both workers)
    worker, other = sorted(before)
    with dask.annotate(workers=[worker], allow_other_workers=False):
        with warnings.catch_warnings():
            # dask-expr does not annotate the partitions of the frame; they
            # hold texts only and may run anywhere
            warnings.filterwarnings("ignore", "Dask annotations", UserWarning)
            E = embed_partitions(vec, ddf["text"])  # its probe runs there too
        values = E.compute()
    assert E.shape == (300, 32) and E.dtype == np.float32
    assert E.chunks[0] == tuple(ddf.map_partitions(len).compute())
    loads = {w: n - before[w] for w, n in dask_client.run(_count_encoder_loads).items()}
    # same rows in the same order (float32 round-off: torch uses one thread
    # per worker and several here)
    assert_allclose(values, expected, rtol=1e-5, atol=1e-6)
    # six partitions and the probe: the encoder was loaded once
    assert loads == {worker: 1, other: 0}, loads
