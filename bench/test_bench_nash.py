"""NASH benchmarks: the C++ training step against the PyTorch reference, epoch
growth in V and in the code length, and encoding throughput.

Run from the repository root (the torch rows need the torch venv; under a
Python without torch they skip and the others run)::

    /work/venv-torch/bin/python -m pytest bench/test_bench_nash.py --benchmark-json=/tmp/bench_nash.json -q
    python -m similearn bench report /tmp/bench_nash.json          # steps/s, ratios, exponents in n

Data: synthetic word counts built once per (documents, V) in a module cache:
100 distinct words per document, drawn without replacement from a Zipf
distribution over the vocabulary (p_w ~ 1 / rank), counts uniform in 1..3,
float32, fixed seed.

What is timed, and what is not
------------------------------
* ``nash-step`` (n = V = 10,000, hidden (500,), 32 bits, noise "data",
  float32, batch 64): one training step per round, at each thread count.

  - ``similearn`` / ``similearn-lazy_adam``: ``NASH._step``, the body of
    ``fit``'s batch loop (draw ``u`` and ``eps``, forward-backward, Adam), inside
    ``blas_threads(1)`` as in ``fit``, kernels at ``n_threads=threads``; the
    per-fit set-up (``_prepare`` on the 1,280-document pool) and 3 steps are
    untimed;
  - ``torch``: ``bench/nash_torch_reference.py``'s ``make_torch_trainer``
    (EmbeddingBag input, fused Adam, ``sigma0`` = NASH's default ``noise_std``
    0.2) and ``step(X_batch)`` on the same CSR batches, torch drawing ``u`` /
    ``eps`` itself; building its batch tensors from the SciPy CSR slice is
    part of its step.  3 untimed steps first (Adam's state allocation).
    ``torch-csr`` / ``torch-dense`` / ``torch-foreach``: the same with CSR or
    dense input, or foreach Adam, to show that ``torch`` is the fastest variant.

  Both walk through the same 20 batches (a fixed permutation of the pool).
  Checked: the batch losses are finite.
* ``nash-epoch-V``: ``NASH(n_bits=32, hidden_sizes=(500,), n_epochs=1,
  n_threads=1).fit(X)`` on 2,000 documents (whole fit: validation,
  initialisation, 32 steps), V = 2,500 .. 20,000 (n = V).
* ``nash-epoch-bits``: the same at V = 10,000 with n_bits = 8 .. 128
  (n = n_bits).
* ``nash-20ng-epoch`` / ``nash-20ng-fit``: ``NASH(n_bits=32)`` with its
  defaults (hidden (500, 500), noise "data", batch 64, Adam) on a corpus shaped
  like 20 Newsgroups: ``make_topic_documents(13,314, 10,000 words, 20 topics,
  80 tokens)``, TF-IDF fitted on the first 11,314 documents (the training set,
  ~74 distinct words a document), the other 2,000 the queries.  The epoch
  group times ``n_epochs=1`` (3 rounds), the fit group the default (15 epochs)
  (1 round), each the whole ``fit`` (validation, initialisation, the epochs),
  at ``n_threads=threads``; corpus generation is untimed.  The fit records
  ``extra_info["p_at_100"]``: precision of the 100 training documents nearest
  in Hamming distance to each query (relevant: same topic), checked > 0.85.
* ``nash-encode``: ``transform`` of 20,000 documents (V = 10,000) by a NASH
  with hidden (500, 500) and 32 bits after a 1-epoch fit on them (fit once,
  outside the timed region), at ``n_threads=threads``; next to
  ``LSHHasher(n_bits=32).transform`` of the same matrix (SciPy sparse x dense
  product, single-threaded whatever ``threads`` says).  Checked: code shapes.
"""
import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from similearn import NASH, LSHHasher
from similearn._config import blas_threads

_BENCH = os.path.dirname(os.path.abspath(__file__))
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

NNZ = 100          # distinct words per document
BATCH = 64
STEP_V, STEP_HIDDEN, STEP_BITS = 10_000, (500,), 32
STEP_POOL = 20 * BATCH
STEP_ROUNDS = 200
NOISE_STD = 0.2    # NASH's default noise_std, passed to torch as sigma0

_CACHE = {}


def _documents(n, V, seed=0):
    """n x V CSR float32 counts: NNZ distinct Zipf words per row, counts 1..3 (cached)."""
    key = ("docs", n, V, seed)
    if key not in _CACHE:
        rng = np.random.default_rng(seed)
        p = 1.0 / np.arange(1, V + 1, dtype=np.float64)
        p /= p.sum()
        words = np.empty((n, NNZ), np.int64)
        draws = 4 * NNZ
        for start in range(0, n, 2000):
            m = min(2000, n - start)
            d = rng.choice(V, size=(m, draws), p=p)
            # the first NNZ distinct words of each row, in draw order: sampling without replacement
            order = np.argsort(d, axis=1, kind="stable")
            ds = np.take_along_axis(d, order, axis=1)
            new_sorted = np.ones(ds.shape, bool)
            new_sorted[:, 1:] = ds[:, 1:] != ds[:, :-1]
            new = np.empty_like(new_sorted)
            np.put_along_axis(new, order, new_sorted, axis=1)
            keep = new & (np.cumsum(new, axis=1) <= NNZ)
            if not (keep.sum(axis=1) == NNZ).all():
                raise RuntimeError(f"fewer than {NNZ} distinct words in {draws} draws (V={V})")
            words[start:start + m] = np.sort(d[keep].reshape(m, NNZ), axis=1)
        vals = rng.integers(1, 4, size=n * NNZ).astype(np.float32)
        indptr = np.arange(0, n * NNZ + 1, NNZ, dtype=np.int64)
        _CACHE[key] = sp.csr_matrix((vals, words.ravel(), indptr), shape=(n, V))
    return _CACHE[key]


def _step_batches():
    """The step pool and its 20 batches (row indices into the pool), cached."""
    if "step" not in _CACHE:
        X = _documents(STEP_POOL, STEP_V, seed=1)
        perm = np.random.default_rng(2).permutation(STEP_POOL).astype(np.int64)
        rows = [np.ascontiguousarray(perm[i:i + BATCH]) for i in range(0, STEP_POOL, BATCH)]
        _CACHE["step"] = X, rows
    return _CACHE["step"]


def _similearn_step(X, batches, optimizer, threads):
    """One NASH.fit batch (u/eps draws, forward-backward, Adam) as a closure, after set-up."""
    est = NASH(n_bits=STEP_BITS, hidden_sizes=STEP_HIDDEN, noise="data", noise_std=NOISE_STD, dtype="float32",
               n_epochs=1, batch_size=BATCH, optimizer=optimizer, random_state=0, n_threads=threads)
    st = est._prepare(X, None)  # fit's own set-up (validation, scaling, initialisation, workspace)
    state = {"i": 0}

    def step():
        rows = batches[state["i"] % len(batches)]
        state["i"] += 1
        with blas_threads(1):
            parts = est._step(st, rows)  # exactly the body of fit's batch loop
        return parts["rec"] + parts["kl"] + parts["nkl"]

    for _ in range(3):
        step()
    return step


# torch variants: (input layer, Adam implementation); "torch" is the fastest, the peer
TORCH_VARIANTS = {"torch": ("embedding_bag", "fused"), "torch-csr": ("csr", "fused"),
                  "torch-dense": ("dense", "fused"), "torch-foreach": ("embedding_bag", "foreach")}


def _torch_step(X, batches, threads, variant):
    pytest.importorskip("torch", reason="the PyTorch reference needs torch")
    import nash_torch_reference as ntr

    sparse_input, adam = TORCH_VARIANTS[variant]
    tr = ntr.make_torch_trainer(STEP_V, STEP_HIDDEN, STEP_BITS, noise="data", sigma0=NOISE_STD, threads=threads,
                                sparse_input=sparse_input, adam=adam, seed=0)
    Xb = [X[rows] for rows in batches]
    state = {"i": 0}

    def step():
        b = Xb[state["i"] % len(Xb)]
        state["i"] += 1
        return tr.step(b)

    for _ in range(3):
        step()
    return step


@pytest.mark.benchmark(group="nash-step")
@pytest.mark.parametrize("impl", ["similearn", "similearn-lazy_adam", *TORCH_VARIANTS])
def test_nash_step(timed, threads, impl):
    X, batches = _step_batches()
    if impl.startswith("torch"):
        step = _torch_step(X, batches, threads, impl)
    else:
        step = _similearn_step(X, batches, "lazy_adam" if impl.endswith("lazy_adam") else "adam", threads)
    loss = timed(step, rounds=STEP_ROUNDS, n=STEP_V, items=1, unit="steps", impl=impl, threads=threads,
                 description=f"one Adam step, batch {BATCH}, V={STEP_V}, hidden {STEP_HIDDEN}, {STEP_BITS} bits, "
                             f"noise 'data', float32, {NNZ} words/doc")
    assert np.isfinite(loss)


def _fit_epoch(X, n_bits):
    return NASH(n_bits=n_bits, hidden_sizes=(500,), n_epochs=1, batch_size=BATCH, random_state=0,
                n_threads=1).fit(X)


@pytest.mark.benchmark(group="nash-epoch-V")
@pytest.mark.parametrize("V", [2_500, 5_000, 10_000, 20_000])
def test_nash_epoch_V(timed, V):
    X = _documents(2_000, V)
    est = timed(_fit_epoch, X, 32, rounds=5, n=V, items=2_000, unit="docs", impl="similearn", threads=1)
    assert np.isfinite(est.loss_history_[-1])


@pytest.mark.benchmark(group="nash-epoch-bits")
@pytest.mark.parametrize("n_bits", [8, 16, 32, 64, 128])
def test_nash_epoch_bits(timed, n_bits):
    X = _documents(2_000, 10_000)
    est = timed(_fit_epoch, X, n_bits, rounds=5, n=n_bits, items=2_000, unit="docs", impl="similearn", threads=1)
    assert np.isfinite(est.loss_history_[-1])


NG20_TRAIN, NG20_TEST, NG20_V = 11_314, 2_000, 10_000


def _ng20():
    """The 20-Newsgroups-shaped corpus (TF-IDF of generated topic documents), cached."""
    if "ng20" not in _CACHE:
        from sklearn.feature_extraction.text import TfidfTransformer
        from similearn.datasets import make_topic_documents

        X, y = make_topic_documents(NG20_TRAIN + NG20_TEST, NG20_V, 20, 80, random_state=0)
        tf = TfidfTransformer().fit(X[:NG20_TRAIN])
        _CACHE["ng20"] = (tf.transform(X[:NG20_TRAIN]).tocsr(), tf.transform(X[NG20_TRAIN:]).tocsr(),
                          y[:NG20_TRAIN], y[NG20_TRAIN:])
    return _CACHE["ng20"]


def _ng20_fit(X, n_epochs, threads):
    kw = {} if n_epochs is None else {"n_epochs": n_epochs}  # None: the default
    return NASH(n_bits=32, random_state=0, n_threads=threads, **kw).fit(X)


@pytest.mark.benchmark(group="nash-20ng-epoch")
def test_nash_20ng_epoch(timed, threads):
    Xtr = _ng20()[0]
    est = timed(_ng20_fit, Xtr, 1, threads, rounds=3, n=NG20_V, items=NG20_TRAIN, unit="docs", impl="similearn",
                threads=threads, description="one epoch of NASH(n_bits=32) defaults, 11,314 x 10,000 TF-IDF")
    assert np.isfinite(est.loss_history_[-1])


@pytest.mark.benchmark(group="nash-20ng-fit")
def test_nash_20ng_fit(timed, benchmark, threads):
    Xtr, Xte, ytr, yte = _ng20()
    est = timed(_ng20_fit, Xtr, None, threads, rounds=1, n=NG20_V, items=NG20_TRAIN, unit="docs", impl="similearn",
                threads=threads, description="NASH(n_bits=32) default fit, 11,314 x 10,000 TF-IDF")
    p = float(est.retrieval_precision(Xte, Xtr, yte, ytr, k=100))
    benchmark.extra_info["p_at_100"] = round(p, 4)
    assert p > 0.85


def _encoders():
    """20,000 documents, a NASH (500, 500) x 32 bits after one epoch, and an LSH (cached)."""
    if "encode" not in _CACHE:
        X = _documents(20_000, 10_000)
        nash = NASH(n_bits=32, hidden_sizes=(500, 500), n_epochs=1, batch_size=BATCH, random_state=0,
                    n_threads=2).fit(X)
        lsh = LSHHasher(n_bits=32, random_state=0).fit(X)
        _CACHE["encode"] = X, nash, lsh
    return _CACHE["encode"]


@pytest.mark.benchmark(group="nash-encode")
@pytest.mark.parametrize("impl", ["similearn", "lsh"])
def test_nash_encode(timed, threads, impl):
    X, nash, lsh = _encoders()
    if impl == "similearn":
        nash.set_params(n_threads=threads)
        codes = timed(nash.transform, X, rounds=5, n=X.shape[0], items=X.shape[0], unit="docs", impl=impl,
                      threads=threads)
    else:
        codes = timed(lsh.transform, X, rounds=10, n=X.shape[0], items=X.shape[0], unit="docs", impl=impl,
                      threads=threads)
    assert codes.shape == (X.shape[0], 32) and codes.dtype == np.uint8
