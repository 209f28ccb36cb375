"""Precision of the top 100 by code length: NASH, NASH-N, NASH-DN against LSH and ITQ.

The paper's Table (unsupervised semantic hashing) on a generated corpus: documents
from ``make_topic_documents`` (LDA-like, one dominant topic per document), TF-IDF
weights fitted on the training split, precision of the 100 training documents
nearest in Hamming distance to each test document (relevant = same topic).  Every
model uses its default parameters (NASH: 15 epochs, hidden (500, 500), Adam 1e-3).

    python bench/compare_nash_bits.py [--n-train 10000] [--n-test 2000] [--vocab 5000] [--topics 20]
                                      [--methods LSH ITQ NASH NASH-N NASH-DN NASH-DN-sup] [--alpha 1.0]

``NASH-DN-sup`` is the supervised extension (Eq. 7) with weight ``--alpha`` on the
topic labels of the training documents; it is left out unless asked for.
"""
import argparse
import time

from sklearn.feature_extraction.text import TfidfTransformer

from similearn import ITQHasher, LSHHasher, NASH
from similearn.datasets import make_topic_documents


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-train", type=int, default=10000)
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--bits", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", nargs="+", default=["LSH", "ITQ", "NASH", "NASH-N", "NASH-DN"])
    ap.add_argument("--alpha", type=float, default=1.0)
    args = ap.parse_args(argv)
    n = args.n_train + args.n_test
    X, y = make_topic_documents(n, args.vocab, args.topics, 80, random_state=args.seed)
    tfidf = TfidfTransformer().fit(X[:args.n_train])
    Xtr, Xte = tfidf.transform(X[:args.n_train]), tfidf.transform(X[args.n_train:])
    ytr, yte = y[:args.n_train], y[args.n_train:]
    methods = {
        "LSH": lambda b: LSHHasher(n_bits=b, random_state=args.seed),
        "ITQ": lambda b: ITQHasher(n_bits=b, random_state=args.seed),
        "NASH": lambda b: NASH(n_bits=b, noise="none", random_state=args.seed),
        "NASH-N": lambda b: NASH(n_bits=b, noise="fixed", random_state=args.seed),
        "NASH-DN": lambda b: NASH(n_bits=b, noise="data", random_state=args.seed),
        "NASH-DN-sup": lambda b: NASH(n_bits=b, noise="data", supervised=args.alpha, random_state=args.seed),
    }
    unknown = set(args.methods) - set(methods)
    if unknown:
        ap.error(f"unknown methods {sorted(unknown)}; choose from {list(methods)}")
    print(f"{args.n_train} training / {args.n_test} query documents, V = {args.vocab}, {args.topics} topics")
    print("| method | " + " | ".join(f"{b} bits" for b in args.bits) + " | fit time (s) |")
    print("|---|" + "---|" * (len(args.bits) + 1))
    for name in args.methods:
        ps, ts = [], []
        for b in args.bits:
            t0 = time.perf_counter()
            est = methods[name](b).fit(Xtr, ytr)  # y is used by the supervised variant only
            ts.append(time.perf_counter() - t0)
            ps.append(est.retrieval_precision(Xte, Xtr, yte, ytr, k=100))
        print(f"| {name} | " + " | ".join(f"{p:.4f}" for p in ps) + f" | {min(ts):.1f}-{max(ts):.1f} |", flush=True)


if __name__ == "__main__":
    main()
