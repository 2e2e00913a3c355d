"""Write ``legacy_pickles.pkl``: estimators pickled by sklearn-isotropy 0.1.0.dev0.

This script was run once, on commit 90e9ed1 (the flat ``sklearn_isotropy/_*.py``
layout, before the package was split into families), to make the fixture that
``tests/test_persistence.py`` loads: pickles of that release must keep loading
and giving the same numbers. It is kept to document how the fixture was made;
rerunning it on a later commit makes a pickle of that commit instead.

    git checkout 90e9ed1 && python tests/data/make_legacy_pickles.py
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main():
    from sklearn.pipeline import make_pipeline

    import sklearn_isotropy
    from sklearn_isotropy import (
        BertPoolingVectorizer,
        GlowFlowTransformer,
        MomentAccumulator,
        NATSVTransformer,
        PairedCosineSimilarity,
        StandardNormalizer,
        WhiteningTransformer,
    )

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6)) @ rng.normal(size=(6, 6)) + 2.0
    X_test = rng.normal(size=(20, 6)) @ rng.normal(size=(6, 6)) + 2.0
    pairs = rng.normal(size=(100, 2, 6)) + 1.0

    whitening = WhiteningTransformer(n_components=4, shrinkage="ledoit-wolf")
    whitening.partial_fit(X[:150]).partial_fit(X[150:])
    estimators = {
        "whitening_streamed": whitening,
        "whitening_zca": WhiteningTransformer(method="zca", power=0.5).fit(X),
        "natsv": NATSVTransformer(n_components=2).fit(X),
        "standard": StandardNormalizer().fit(X),
        "pipeline": make_pipeline(
            StandardNormalizer(), WhiteningTransformer(n_components=3)
        ).fit(X),
        "flow": GlowFlowTransformer(
            depth=1, hidden_size=4, max_iter=2, random_state=0
        ).fit(X.astype(np.float32)),
    }
    paired = PairedCosineSimilarity(WhiteningTransformer()).fit(pairs)
    moments = MomentAccumulator(6).update(X)
    texts = ["A man is playing a guitar.", "The cat sat on the mat.", ""]
    vectorizer = BertPoolingVectorizer(pooling="first_last_avg").fit(texts)

    expected = {name: est.transform(X_test) for name, est in estimators.items()}
    expected["flow_score_samples"] = estimators["flow"].score_samples(
        X_test.astype(np.float32)
    )
    expected["flow"] = estimators["flow"].transform(X_test.astype(np.float32))
    expected["paired_predict"] = paired.predict(pairs[:10])
    expected["moments_covariance"] = moments.covariance()
    expected["vectorizer"] = vectorizer.transform(texts)

    payload = {
        "version": sklearn_isotropy.__version__,
        "X": X,
        "X_test": X_test,
        "pairs": pairs,
        "texts": texts,
        "pickles": {
            name: pickle.dumps(obj, protocol=4)
            for name, obj in {
                **estimators,
                "paired": paired,
                "moments": moments,
                "vectorizer": vectorizer,
            }.items()
        },
        "expected": expected,
    }
    out = Path(__file__).with_name("legacy_pickles.pkl")
    out.write_bytes(pickle.dumps(payload, protocol=4))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
