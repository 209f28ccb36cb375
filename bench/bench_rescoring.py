"""RescoringIndex (binary codes + exact float rescoring) against the exact float search.

Data: 1M x 384 float32 synthetic "sentence embeddings", generated once into
``--data`` (default /tmp/rs_bench) as .npy and reused:

* a latent space of 96 dimensions holding 1000 topics (centres N(0, I)) and 50 000
  subtopics (a topic's centre plus N(0, 0.5^2 I)); a point is its subtopic's centre
  plus anisotropic Gaussian noise, per-dimension std 1.5 * j^-0.5 (j = 1..96, a
  decaying spectrum); subtopic sizes follow a Zipf-like law (weight 1 / rank^0.7);
* a fixed random linear map to 384-d whose singular values decay as j^-0.3 (an
  anisotropic embedding of the latent subspace, as sentence encoders' are), plus
  isotropic N(0, 0.05^2) noise in all 384 dimensions, then L2 normalisation.  A
  query's exact neighbours then have cosine ~0.91 (1st) and ~0.87 (10th) among the
  1M rows (~0.89, ~0.81 and ~0.32 for the 1st, 10th and 1000th among 200 000), a
  spread like that of sentence embeddings (no downloads are possible);
* 1000 queries drawn the same way (held out: not in the database).

Measured (cosine, k = 10): the exact ``topk`` time and RescoringIndex.search for
sign-384 (scan), ITQ-256 and ITQ-128 codes (scan and MIH) at oversample 5/10/20/50,
recall@10 against the exact top 10, 1 and 2 threads, alternating exact and rescoring
runs, ``--repeats`` runs each (median reported); the RAM each storage option holds.
Run once per SIMD level (SIMILEARN_ISA=avx2 OPENBLAS_CORETYPE=Haswell, and native)
under ``flock /tmp/bench.lock``; results go to bench/results/rescoring_<isa>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import similearn
from similearn.neighbors import RescoringIndex, topk

N, D, LATENT, TOPICS, SUBTOPICS, N_QUERIES, K = 1_000_000, 384, 96, 1000, 50_000, 1000, 10
OVERSAMPLES = (5, 10, 20, 50)


def generate(path, n=N, seed=0):
    """Write X.npy (n x 384) and Q.npy (1000 x 384), float32, unit rows (see the module docstring)."""
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((TOPICS, LATENT))
    centres = topics[rng.integers(0, TOPICS, SUBTOPICS)] + 0.5 * rng.standard_normal((SUBTOPICS, LATENT))
    spread = 1.5 * np.arange(1, LATENT + 1) ** -0.5
    weights = 1.0 / np.arange(1, SUBTOPICS + 1) ** 0.7
    weights /= weights.sum()
    U, _ = np.linalg.qr(rng.standard_normal((LATENT, LATENT)))
    V, _ = np.linalg.qr(rng.standard_normal((D, LATENT)))
    M = (U * np.arange(1, LATENT + 1) ** -0.3) @ V.T        # latent -> 384-d

    def draw(m):
        c = rng.choice(SUBTOPICS, size=m, p=weights)
        z = centres[c] + rng.standard_normal((m, LATENT)) * spread
        x = z @ M + 0.05 * rng.standard_normal((m, D))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    X = np.lib.format.open_memmap(os.path.join(path, "X.npy"), mode="w+", dtype=np.float32, shape=(n, D))
    for s in range(0, n, 100_000):
        X[s:s + 100_000] = draw(min(100_000, n - s))
    X.flush()
    np.save(os.path.join(path, "Q.npy"), draw(N_QUERIES))


def recall(idx, exact):
    return float(np.mean([len(set(a) & set(b)) / exact.shape[1] for a, b in zip(idx, exact)]))


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/rs_bench")
    ap.add_argument("--isa", default=os.environ.get("SIMILEARN_ISA", "native"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--hashers", default="sign384,itq256,itq128")
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--faiss", action="store_true", help="only the faiss baseline (IndexBinaryFlat + NumPy rescoring)")
    args = ap.parse_args()
    if args.generate or not os.path.exists(os.path.join(args.data, "Q.npy")):
        generate(args.data)
    X = np.load(os.path.join(args.data, "X.npy"))            # in RAM: the exact search's database
    Q = np.load(os.path.join(args.data, "Q.npy"))
    threads = [int(t) for t in args.threads.split(",")]
    if args.faiss:
        return faiss_baseline(X, Q, threads, args)
    out = {"isa": args.isa, "cpu": platform.processor() or platform.machine(), "n": X.shape[0], "d": X.shape[1],
           "k": K, "repeats": args.repeats, "similearn": similearn.__version__, "exact": {}, "runs": []}
    exact_idx = topk(Q, X, K, "cosine")[0]
    sample = np.random.default_rng(1).choice(X.shape[0], 100_000, replace=False)
    indexes = {}
    for name in args.hashers.split(","):
        if name == "sign384":
            indexes[name] = ("scan", RescoringIndex(hasher="sign", index="scan").fit(X))
        else:
            bits = int(name[3:])
            t, itq = timed(lambda: similearn.ITQHasher(n_bits=bits, random_state=0).fit(X[sample]))
            out.setdefault("itq_fit_seconds", {})[name] = t
            for index in ("scan", "mih"):
                t, est = timed(lambda: RescoringIndex(hasher=itq, index=index).fit(X))
                indexes[f"{name}-{index}"] = (index, est)
                out.setdefault("fit_seconds", {})[f"{name}-{index}"] = t
                out.setdefault("index_memory_bytes", {})[f"{name}-{index}"] = est.memory_bytes_
    for nt in threads:
        similearn.set_num_threads(nt)
        exact_times = []
        per = {key: {o: [] for o in OVERSAMPLES} for key in indexes}
        rec = {}
        for _ in range(args.repeats):       # alternate: exact, then every configuration
            exact_times.append(timed(lambda: topk(Q, X, K, "cosine", n_threads=nt))[0])
            for key, (_, est) in indexes.items():
                est.set_params(n_threads=nt)
                for o in OVERSAMPLES:
                    est.oversample_ = o
                    t, (idx, _) = timed(lambda: est.search(Q, K))
                    per[key][o].append(t)
                    rec[(key, o)] = recall(idx, exact_idx)
        ex = statistics.median(exact_times)
        out["exact"][nt] = {"median_s": ex, "runs_s": exact_times}
        for key in indexes:
            for o in OVERSAMPLES:
                med = statistics.median(per[key][o])
                out["runs"].append({"threads": nt, "config": key, "oversample": o, "median_s": med,
                                    "runs_s": per[key][o], "speedup": ex / med, "recall@10": rec[(key, o)]})
                print(f"{args.isa} t={nt} {key:14s} o={o:3d} {med:7.3f}s x{ex / med:6.1f} "
                      f"recall={rec[(key, o)]:.4f} (exact {ex:.3f}s)", flush=True)
    # the Hamming search alone (the floor of the search time), 1 thread, oversample 10
    similearn.set_num_threads(1)
    for key, (_, est) in indexes.items():
        est.set_params(n_threads=1)
        codes = est._encode(Q)
        out.setdefault("hamming_only_s", {})[key] = statistics.median(
            timed(lambda: est._hamming(codes, 10 * K))[0] for _ in range(args.repeats))
    out["memory"] = memory_table(X, Q, exact_idx, args.data)
    out["target_recall"] = target_recall_check(X, Q, exact_idx)
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", f"rescoring_{args.isa}.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k not in ("runs",)}, indent=1))


def faiss_baseline(X, Q, threads, args):
    """The by-hand pipeline users write: faiss IndexBinaryFlat over the same sign-384 codes for
    the candidates, then float rescoring in NumPy (batched matmul of the gathered rows; the rows
    are unit vectors, so cosine = inner product), against the exact topk, alternating."""
    import faiss

    sign = RescoringIndex(hasher="sign", index="scan").fit(X)
    qcodes = sign._encode(Q).view(np.uint8)
    index = faiss.IndexBinaryFlat(64 * sign.codes_.shape[1])
    index.add(sign.codes_.view(np.uint8))
    exact_idx = topk(Q, X, K, "cosine")[0]

    def search(c):
        _, cand = index.search(qcodes, c)
        out = np.empty((len(Q), K), np.int64)
        for s in range(0, len(Q), 64):
            C = cand[s:s + 64]
            scores = np.matmul(X[C], Q[s:s + 64, :, None])[:, :, 0]
            top = np.argsort(-scores, axis=1, kind="stable")[:, :K]
            out[s:s + 64] = np.take_along_axis(C, top, axis=1)
        return out

    out = {"isa": args.isa, "faiss": faiss.__version__, "runs": []}
    for nt in threads:
        faiss.omp_set_num_threads(nt)
        times = {o: [] for o in OVERSAMPLES}
        exact = []
        rec = {}
        for _ in range(args.repeats):
            exact.append(timed(lambda: topk(Q, X, K, "cosine", n_threads=nt))[0])
            for o in OVERSAMPLES:
                t, idx = timed(lambda: search(o * K))
                times[o].append(t)
                rec[o] = recall(idx, exact_idx)
        ex = statistics.median(exact)
        for o in OVERSAMPLES:
            med = statistics.median(times[o])
            out["runs"].append({"threads": nt, "oversample": o, "median_s": med, "exact_median_s": ex,
                                "speedup": ex / med, "recall@10": rec[o]})
            print(f"faiss {args.isa} t={nt} o={o:3d} {med:7.3f}s x{ex / med:6.1f} recall={rec[o]:.4f}", flush=True)
    with open(os.path.join(os.path.dirname(__file__), "results", f"rescoring_faiss_{args.isa}.json"), "w") as f:
        json.dump(out, f, indent=1)


def target_recall_check(X, Q, exact_idx):
    """target_recall=0.98 on sign-384: the oversample fit estimates from 1000 rows of X, and the
    recall@10 measured at it on the 1000 held-out queries."""
    similearn.set_num_threads(2)
    t, est = timed(lambda: RescoringIndex(hasher="sign", index="scan", target_recall=0.98, random_state=0).fit(X))
    idx, _ = est.search(Q, K)
    row = {"fit_s": t, "oversample_": est.oversample_, "estimated_recall_": est.estimated_recall_,
           "held_out_recall@10": recall(idx, exact_idx)}
    print("target_recall 0.98", row, flush=True)
    return row


def memory_table(X, Q, exact_idx, data):
    """Bytes in RAM per storage option (sign-384 codes, scan) and the recall@10 at oversample 20."""
    rows = {"float_vectors_bytes": int(X.nbytes)}
    path = os.path.join(data, "X.npy")
    Xm = np.load(path, mmap_mode="r")                       # the file itself: nothing written
    for storage in ("float", "float-mmap", "float16", "int8"):
        kw = {"storage": storage.split("-")[0]}
        if storage != "float":
            kw["vectors_path"] = path
        est = RescoringIndex(hasher="sign", index="scan", oversample=20, **kw).fit(Xm if "vectors_path" in kw else X)
        t, (idx, _) = timed(lambda: est.search(Q, K))
        rows[storage] = {"memory_bytes": est.memory_bytes_, "fraction_of_float": est.memory_bytes_ / X.nbytes,
                         "recall@10": recall(idx, exact_idx), "search_s_o20": t}
        print(storage, rows[storage], flush=True)
    return rows


if __name__ == "__main__":
    main()
