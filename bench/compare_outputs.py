"""Do two builds of similearn compute the same bits?  Each model is fitted with a
fixed seed (float32 and float64 where the model takes either) in each build's
interpreter, the outputs are saved, and the two sets compared array by array.

    python bench/compare_outputs.py --a /work/venv-base/bin/python --b python

Only public API is used.  Prints one line per output: identical, or the largest
absolute difference.  Exit status 1 when any output differs.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def _outputs():
    import scipy.sparse as sp

    import similearn as sl
    from similearn.datasets import make_interactions, make_planted_metric

    out = {}
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        tag = np.dtype(dt).name
        X, y, _ = make_planted_metric(300, 40, 5, 5, random_state=1, dtype=dt)
        out[f"FILM/{tag}"] = sl.FILM(n_components=5, max_iter=20, random_state=0).fit(X, y).transform(X)
        out[f"FILM-minibatch/{tag}"] = sl.FILM(n_components=5, max_iter=6, batch_size=40, random_state=0).fit(
            X, y).transform(X)
        out[f"FRML/{tag}"] = sl.FRML(n_components=5, max_iter=3000, random_state=0).fit(X, y).transform(X)
        out[f"SSNE/{tag}"] = sl.SSNE(n_components=8, n_epochs=3, random_state=0).fit(X, y).transform(X)
        out[f"LSH/{tag}"] = sl.LSHHasher(n_bits=32, random_state=0).fit(X).transform(X)
        out[f"ITQ/{tag}"] = sl.ITQHasher(n_bits=16, random_state=0).fit(X).transform(X)
        out[f"KNN/{tag}"] = sl.KNeighborsClassifier(3).fit(X, y).predict_proba(X)
        idx, sc = sl.topk(X[:50], X, 7, metric="cosine")
        out[f"topk/{tag}"], out[f"topk-scores/{tag}"] = idx, sc
        C = sp.random(400, 300, density=0.05, format="csr", random_state=2, dtype=dt)
        C.data = np.ceil(C.data * 4)
        nash = sl.NASH(n_bits=16, hidden_sizes=(32,), n_epochs=2, random_state=0, dtype=tag).fit(C)
        out[f"NASH/{tag}"] = nash.transform(C)
        out[f"NASH-proba/{tag}"] = nash.predict_proba_bits(C)
        d = make_interactions(n_left=300, n_right=200, n_pairs=4000, random_state=3, dtype=dt)
        for name, kw in {"linear": {}, "deep": dict(hidden_sizes=(16,)), "sagram": dict(penalty="sagram"),
                         "exact-pairs": dict(penalty="exact", gramian_weights="pairs"),
                         "shared-adam": dict(shared_embeddings=True, optimizer="adam"),
                         "sqrt-sgd": dict(penalty="sqrt", optimizer="sgd"), "gor": dict(regularizer="gor"),
                         "prior": dict(penalty="sogram")}.items():
            m = sl.TwoTower(validation=None, n_components=8, n_epochs=2, batch_size=64, random_state=0, dtype=tag, **kw)
            if name == "shared-adam":
                m.fit(d.left_features[:, :30], d.right_features[:, :30], d.pairs)
            elif name == "prior":  # the low-rank prior of App. B
                Q, R = rng.standard_normal((300, 3)).astype(dt), rng.standard_normal((200, 3)).astype(dt)
                m.fit(d.left_features, d.right_features, d.pairs, prior=(Q, R))
            else:
                m.fit(d.left_features, d.right_features, d.pairs)
            out[f"TwoTower-{name}/{tag}"] = m.left_embedding_
            out[f"TwoTower-{name}-recommend/{tag}"] = m.recommend(np.arange(50), k=10)[0]
    codes = rng.integers(0, 2**63, size=(2000, 2), dtype=np.uint64)
    out["hamming_topk"] = sl.hamming_topk(codes[:100], codes, 10)[0]
    out.update(_hamming_index_outputs(rng))
    out.update(_filtered_outputs(rng))
    Xm, _, _ = make_planted_metric(200, 20, 4, 4, random_state=4)
    pairs = rng.integers(0, 200, size=(300, 2))
    labels = (pairs[:, 0] % 2 == pairs[:, 1] % 2).astype(int)
    out["PairwiseKNNMatcher"] = sl.PairwiseKNNMatcher(k=3).fit(Xm, pairs[:200], labels[:200]).predict(Xm, pairs[200:])
    return out


def _filtered_outputs(rng):
    """The searches under filters, in the forms both builds take (a per-query CSR exclude; a
    1-D, CSR or mask include; the recommender's 1-D lists), every metric, both dtypes; the
    metrics @k; the k-NN graph; RescoringIndex at a fixed oversample."""
    import scipy.sparse as sp

    import similearn as sl
    from similearn.datasets import make_interactions

    out = {}
    X64 = rng.integers(-3, 4, (1500, 12)).astype(np.float64) + rng.standard_normal((1500, 12))
    ex = sp.random(60, 1500, density=0.05, format="csr", random_state=5)
    inc_rows = sp.random(60, 1500, density=0.3, format="csr", random_state=6)
    shared = rng.choice(1500, 700, replace=False)
    mask = rng.random((60, 1500)) < 0.5
    for dt in (np.float32, np.float64):
        X, tag = X64.astype(dt), np.dtype(dt).name
        for metric in ("ip", "cosine", "euclidean"):
            for name, kw in (("exclude", dict(exclude=ex)), ("include-1d", dict(include=shared, exclude=ex)),
                             ("include-csr", dict(include=inc_rows)), ("include-mask", dict(include=mask)),
                             ("self", dict(exclude_self=True))):
                Q = X if name == "self" else X[:60]
                out[f"topk-{name}-{metric}/{tag}"] = np.concatenate(
                    [a.astype(np.float64) for a in sl.topk(Q, X, 9, metric, **kw)], axis=1)
        out[f"kneighbors_graph/{tag}"] = sl.neighbors.kneighbors_graph(X, 5, mode="distance").data
        ri = sl.RescoringIndex(metric="cosine", oversample=10, hasher="itq", n_bits=8, random_state=0).fit(X)
        out[f"RescoringIndex-oversample10/{tag}"] = np.concatenate([a.astype(np.float64) for a in ri.search(X[:50], 5)],
                                                                   axis=1)
    codes = sl.pack_bits(X64 > 0.2)
    for name, kw in (("exclude", dict(exclude=ex)), ("include-1d", dict(include=shared)),
                     ("include-mask", dict(include=mask))):
        out[f"hamming_topk-{name}"] = np.concatenate(sl.hamming_topk(codes[:60], codes, 9, **kw), axis=1)
    index = sl.HammingIndex().fit(codes)
    out["HammingIndex-filtered"] = np.concatenate(index.search(codes[:60], 9, include=inc_rows, exclude=ex), axis=1)
    d = make_interactions(n_left=200, n_right=150, n_pairs=3000, random_state=7)
    m = sl.TwoTower(validation=None, n_components=8, n_epochs=2, random_state=0).fit(
        d.left_features, d.right_features, d.pairs)
    out["recommend-filtered"] = np.concatenate([a.astype(np.float64) for a in m.recommend(
        np.arange(40), k=12, items=np.arange(0, 150, 2), exclude=np.arange(0, 150, 6))], axis=1)
    out["recommend-deny-only"] = m.recommend(np.arange(40), k=12, exclude=np.arange(0, 150, 5))[0]
    out["similar_items-filtered"] = m.similar_items(np.arange(30), k=7, exclude=np.arange(10, 20))[0]
    test = d.pairs[:300]
    rm = sl.metrics.ranking_metrics_at_k(m.left_embedding_, m.right_embedding_, d.pairs[300:], test, k=10)
    out["ranking_metrics_at_k"] = np.array([rm[k] for k in ("precision", "recall", "map", "ndcg", "mrr", "auc")])
    out["interaction_map_at_k"] = np.array([sl.metrics.interaction_map_at_k(m.left_embedding_, m.right_embedding_,
                                                                            test, 10)])
    return out


def _intended_outputs():
    """The one intended change of issue 40, shown apart: RescoringIndex's defaults (before:
    oversample 10; now: the oversample whose estimated recall@10 reaches 0.95)."""
    import similearn as sl

    rng = np.random.default_rng(11)
    centres = rng.standard_normal((40, 32))
    X = (centres[rng.integers(0, 40, 6000)] + 0.7 * rng.standard_normal((6000, 32))).astype(np.float32)
    exact = sl.topk(X[:300], X, 10)[0]
    idx = sl.RescoringIndex(random_state=0).fit(X).search(X[:300], 10)[0]
    return {"RescoringIndex-defaults-recall@10": np.array([np.mean([len(set(a) & set(b)) / 10
                                                                   for a, b in zip(idx, exact)])])}


def _hamming_index_outputs(rng):
    """HammingIndex k-NN and radius results: direct and sorted tables, after add, and
    sharded over a Dask array (when dask is installed)."""
    import similearn as sl

    centres = rng.integers(0, 2, size=(12, 128))
    bits = centres[rng.integers(0, 12, 3000)] ^ (rng.random((3000, 128)) < 0.06)
    codes, queries = sl.pack_bits(bits[:2800]), sl.pack_bits(bits[2800:])
    out = {}
    for m in (None, 4, 8):   # 4: 32-bit substrings (sorted tables)
        index = sl.HammingIndex(m=m).fit(codes[:2000]).add(codes[2000:])
        out[f"HammingIndex-idx/m={m}"], out[f"HammingIndex-dist/m={m}"] = index.search(queries, 10)
        for name, a in zip(("indptr", "ind", "dist"), index.radius_search(queries, 12)):
            out[f"HammingIndex-radius-{name}/m={m}"] = a
    try:
        import dask.array as da
    except ImportError:
        return out
    index = sl.HammingIndex().fit(da.from_array(codes, chunks=(700, -1)))
    out["HammingIndex-sharded-idx"], out["HammingIndex-sharded-dist"] = index.search(queries, 10)
    out["HammingIndex-sharded-radius"] = index.radius_search(queries, 12)[1]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a")
    p.add_argument("--b")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        outputs = _outputs()
        outputs.update({f"intended:{k}": v for k, v in _intended_outputs().items()})
        np.savez(args.child, **{k.replace("/", "__"): v for k, v in outputs.items()})
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for side in ("a", "b"):
            files[side] = Path(tmp) / f"{side}.npz"
            subprocess.run([getattr(args, side), __file__, "--child", str(files[side])], check=True)
        A, B = np.load(files["a"]), np.load(files["b"])
        bad, keys = 0, [k for k in A.files if not k.startswith("intended:")]
        for key in keys:
            a, b = A[key], B[key]
            same = a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
            diff = "" if same else (f"max |diff| {np.max(np.abs(a.astype(float) - b.astype(float))):.3g}"
                                    if a.shape == b.shape else f"shapes {a.shape} / {b.shape}")
            bad += not same
            print(f"{key.replace('__', '/'):42s} {'identical' if same else 'DIFFERENT ' + diff}")
        print(f"{len(keys) - bad} of {len(keys)} outputs bit-identical")
        for key in (k for k in A.files if k.startswith("intended:")):   # changes meant to happen
            print(f"intended change  {key[9:].replace('__', '/')}: a {A[key].tolist()}  b {B[key].tolist()}")
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
