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
    Xm, _, _ = make_planted_metric(200, 20, 4, 4, random_state=4)
    pairs = rng.integers(0, 200, size=(300, 2))
    labels = (pairs[:, 0] % 2 == pairs[:, 1] % 2).astype(int)
    out["PairwiseKNNMatcher"] = sl.PairwiseKNNMatcher(k=3).fit(Xm, pairs[:200], labels[:200]).predict(Xm, pairs[200:])
    return out


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
        np.savez(args.child, **{k.replace("/", "__"): v for k, v in _outputs().items()})
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for side in ("a", "b"):
            files[side] = Path(tmp) / f"{side}.npz"
            subprocess.run([getattr(args, side), __file__, "--child", str(files[side])], check=True)
        A, B = np.load(files["a"]), np.load(files["b"])
        bad = 0
        for key in A.files:
            a, b = A[key], B[key]
            same = a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
            diff = "" if same else f"max |diff| {np.max(np.abs(a.astype(float) - b.astype(float))):.3g}"
            bad += not same
            print(f"{key.replace('__', '/'):34s} {'identical' if same else 'DIFFERENT ' + diff}")
        print(f"{len(A.files) - bad} of {len(A.files)} outputs bit-identical")
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
