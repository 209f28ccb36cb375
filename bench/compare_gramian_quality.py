"""Quality of the Gramian estimators of ``similearn.TwoTower`` (Krichene et al.,
Sec. 4.1-4.2) on a generated implicit-feedback problem: MAP@10 over training
time for each penalty, and the Gramian estimation error of every estimator along
one fixed training trajectory.  Prints markdown tables; ``--out`` saves the raw
results as JSON.

Run from the repository root (default size: ~5 min at 1 thread on 2 idle cores)::

    python bench/compare_gramian_quality.py --out /tmp/gramian_quality.json
    python bench/compare_gramian_quality.py --n-left 5000 --n-right 5000 --n-pairs 100000 --epochs 3  # quick

Problem: ``make_interactions(n_left, n_right, n_pairs, popularity=1.0,
random_state=seed)`` (planted clusters, Zipf popularity on both sides, one-hot id
+ cluster tag features).  The generator keeps repeat interactions (1.2M draws
give ~555k distinct pairs); the 90/10 split is by *distinct* pair: every
distinct (left, right) pair goes to training (with all its repeats, ~1.09M pair
rows) or to validation (once), so no validation pair is ever seen in training.
``--split rows`` splits the pair rows instead (then ~half of the validation
pairs repeat a training pair, and stay candidates since they are relevant).
Reference rankings that need no training are scored on the same queries:
popularity (training counts), the generator's own model (planted cluster x
popularity) and planted clusters with a random order inside a cluster.

MAP@10 (``similearn.metrics.interaction_map_at_k``, Sec. 4.1): the validation
pairs of a fixed random sample of ``--map-queries`` left items (default 5,000;
0 = every left item with a validation pair), ranked against every right item
(``n_candidates=None``, exhaustive) unless ``--n-candidates`` is given, training
pairs excluded from the candidates.

Training: ``TwoTower(n_components=64, penalty=P, random_state=seed,
n_threads=threads)`` with every other hyper-parameter at its default, for each P
in (sogram, sagram, uniform, linear, sqrt, none): ``fit(n_epochs=1)`` then one
``partial_fit`` per further epoch over the same training pairs, MAP@10 after
each epoch next to the cumulative training time (``sum(epoch_times_)``: the
training passes only, not the set-up nor the evaluation).  ``partial_fit``
continues the run (parameters, optimiser state, step counter ``t_``, SOGram's
running estimates; SAGram's cache is re-filled with the current embeddings, the
sampling estimators have no state); the script checks the step counter and the
histories after every call.  Each ``partial_fit`` draws from its own random
stream (seed, call number), so the run is not bitwise ``fit(n_epochs=E)``;
``--check-epochs`` (default 3) runs ``fit(n_epochs=3)`` for sogram as well and
prints both losses and MAPs.

Gramian error (Sec. 4.2, Fig. 2): ``similearn.gramian.gramian_error_trajectory``
follows one trajectory of ``TwoTower(penalty="sogram")`` (same settings, same
training pairs) for ``--traj-steps`` steps (default: one epoch) and every
``--traj-every`` steps records ||Ghat - G||_F / ||G||_F of SOGram (alpha 0.1 and
0.01), SAGram (saga, sag) and the sampling estimators (uniform, linear, sqrt),
each drawing its own Gramian batch of ``batch_size`` items a step, G the exact
Gramians over the whole catalogues weighted by the training item frequencies.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np

PENALTIES = ("sogram", "sagram", "uniform", "linear", "sqrt", "none")


def _split(pairs, n_right, seed, val_fraction=0.1, by="distinct"):
    """by="distinct": training pair rows (all repeats of the training distinct
    pairs) and the distinct validation pairs; by="rows": a plain split of the pair
    rows (a validation pair may repeat a training pair)."""
    keys = pairs[:, 0].astype(np.int64) * n_right + pairs[:, 1]
    uniq, inverse = np.unique(keys, return_inverse=True)
    rng = np.random.default_rng(seed)
    if by == "rows":
        perm = rng.permutation(pairs.shape[0])
        n_val = int(round(val_fraction * pairs.shape[0]))
        return np.ascontiguousarray(pairs[perm[n_val:]]), np.ascontiguousarray(pairs[perm[:n_val]]), uniq.size
    is_val = np.zeros(uniq.size, bool)
    is_val[rng.permutation(uniq.size)[:int(round(val_fraction * uniq.size))]] = True
    train = np.ascontiguousarray(pairs[~is_val[inverse.ravel()]])
    val_keys = uniq[is_val]
    val = np.stack([val_keys // n_right, val_keys % n_right], axis=1).astype(np.int64)
    return train, val, uniq.size


def _query_pairs(val, n_queries, seed):
    if not n_queries:
        return val
    lefts = np.unique(val[:, 0])
    if n_queries >= lefts.size:
        return val
    keep = np.random.default_rng(seed + 1).choice(lefts, n_queries, replace=False)
    return val[np.isin(val[:, 0], keep)]


def reference_maps(d, train, qpairs, args):
    """MAP@10 of rankings that need no training, to put the models' numbers in context."""
    from similearn.metrics import interaction_map_at_k

    nL, nR = d.left_features.shape[0], d.right_features.shape[0]
    cl, cr, pop = d.left_clusters, d.right_clusters, d.right_popularity
    C = int(max(cl.max(), cr.max())) + 1
    rng = np.random.default_rng(args.seed + 2)
    jitter = rng.random(nR) * 1e-6  # breaks ties (ties count against the relevant items)
    counts = np.bincount(train[:, 1], minlength=nR).astype(np.float64)
    refs = {}
    refs["popularity (training counts)"] = (np.ones((nL, 1)), (counts + jitter)[:, None])
    # the generator's own model: P(j | i) = 0.9 pop_j / pop(cluster(i)) [same cluster] + 0.1 pop_j
    Lo = np.zeros((nL, C + 1))
    Lo[np.arange(nL), cl] = 1.0
    Lo[:, C] = 1.0
    Ro = np.zeros((nR, C + 1))
    Ro[np.arange(nR), cr] = 0.9 * pop / np.bincount(cr, weights=pop, minlength=C)[cr]
    Ro[:, C] = 0.1 * pop + jitter
    refs["planted oracle (cluster x popularity)"] = (Lo, Ro)
    Lc = Lo.copy()
    Lc[:, C] = 1e-3
    Rc = np.zeros((nR, C + 1))
    Rc[np.arange(nR), cr] = 1.0
    Rc[:, C] = rng.random(nR)
    refs["planted clusters, random within"] = (Lc, Rc)
    return {name: float(interaction_map_at_k(L, R, qpairs, k=10, n_candidates=args.n_candidates,
                                             exclude_pairs=train, random_state=args.seed))
            for name, (L, R) in refs.items()}


def _md_table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _adagrad_mass(model):
    state = getattr(model, "_state", None)  # the training state (gramian/_state.py TrainingState)
    st = state.opt_state if state is not None else {}
    return float(sum(float(np.sum(v[0], dtype=np.float64)) for v in st.values() if v))


def train_curve(penalty, d, train, qpairs, args, n_epochs):
    """MAP@10 after each epoch; returns a list of per-epoch dicts."""
    from similearn import TwoTower
    from similearn.metrics import interaction_map_at_k

    model = TwoTower(n_components=args.k, penalty=penalty, random_state=args.seed, n_threads=args.threads,
                     gramian_weights=args.gramian_weights, penalty_weight=args.penalty_weight,
                     n_epochs=1, validation=None)
    steps_per_epoch = -(-train.shape[0] // model.batch_size)
    rows = []
    for epoch in range(1, n_epochs + 1):
        before = _adagrad_mass(model) if epoch > 1 else 0.0
        t0 = time.perf_counter()
        if epoch == 1:
            model.fit(d.left_features, d.right_features, train)
        else:
            model.partial_fit(d.left_features, d.right_features, train)
        call = time.perf_counter() - t0
        # partial_fit continues the same run: one more epoch on every history, the step
        # counter and the optimiser state carried over (adagrad accumulators only grow)
        assert len(model.epoch_times_) == epoch and len(model.loss_history_) == epoch, penalty
        assert model.t_ == epoch * steps_per_epoch, (model.t_, epoch, steps_per_epoch)
        if model.optimizer == "adagrad" and epoch > 1:
            assert _adagrad_mass(model) > before
        t0 = time.perf_counter()
        mp = interaction_map_at_k(model.left_embedding_, model.right_embedding_, qpairs, k=10,
                                  n_candidates=args.n_candidates, exclude_pairs=train, random_state=args.seed)
        t_eval = time.perf_counter() - t0
        rows.append({"epoch": epoch, "train_seconds": float(sum(model.epoch_times_)),
                     "call_seconds": call, "loss": float(model.loss_history_[-1]), "map10": float(mp),
                     "eval_seconds": t_eval})
        print(f"  {penalty:8s} epoch {epoch:3d}  train {rows[-1]['train_seconds']:8.2f} s  "
              f"loss {rows[-1]['loss']:.4f}  MAP@10 {mp:.4f}  (call {call:.1f} s, eval {t_eval:.1f} s)",
              file=sys.stderr, flush=True)
    return rows, model


def check_continuation(d, train, qpairs, args, curve):
    """fit(n_epochs=E) against fit(1) + (E - 1) partial_fit (sogram)."""
    from similearn import TwoTower
    from similearn.metrics import interaction_map_at_k

    E = args.check_epochs
    m = TwoTower(n_components=args.k, penalty="sogram", random_state=args.seed, n_threads=args.threads, validation=None,
                 gramian_weights=args.gramian_weights, penalty_weight=args.penalty_weight,
                 n_epochs=E).fit(d.left_features, d.right_features, train)
    mp = interaction_map_at_k(m.left_embedding_, m.right_embedding_, qpairs, k=10, n_candidates=args.n_candidates,
                              exclude_pairs=train, random_state=args.seed)
    return {"epochs": E, "fit_loss_history": [float(v) for v in m.loss_history_],
            "partial_loss_history": [r["loss"] for r in curve[:E]], "fit_map10": float(mp),
            "partial_map10": curve[E - 1]["map10"], "fit_train_seconds": float(sum(m.epoch_times_)),
            "partial_train_seconds": curve[E - 1]["train_seconds"]}


def error_trajectory(d, train, args):
    from similearn import TwoTower
    from similearn.gramian import SAGram, SampledGramian, SOGram
    from similearn.gramian import gramian_error_trajectory

    ests = {"SOGram a=0.1": (SOGram(0.1), SOGram(0.1)), "SOGram a=0.01": (SOGram(0.01), SOGram(0.01)),
            "SAGram saga": (SAGram("saga"), SAGram("saga")), "SAGram sag": (SAGram("sag"), SAGram("sag")),
            "uniform": (SampledGramian("uniform"), SampledGramian("uniform")),
            "linear": (SampledGramian("linear"), SampledGramian("linear")),
            "sqrt": (SampledGramian("sqrt"), SampledGramian("sqrt"))}
    model = TwoTower(n_components=args.k, penalty="sogram", random_state=args.seed, n_threads=args.threads,
                     gramian_weights=args.gramian_weights, penalty_weight=args.penalty_weight, validation=None)
    n_steps = args.traj_steps or -(-train.shape[0] // model.batch_size)
    t0 = time.perf_counter()
    res = gramian_error_trajectory(model, d.left_features, d.right_features, train, ests, n_steps=n_steps,
                                   eval_every=args.traj_every, random_state=args.seed)
    wall = time.perf_counter() - t0
    out = {"n_steps": n_steps, "eval_every": args.traj_every, "batch_size": model.batch_size,
           "wall_seconds": wall, "step": res["step"].tolist(), "time": res["time"].tolist(),
           "errors": {name: res[name].tolist() for name in ests}}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-left", type=int, default=50_000)
    ap.add_argument("--n-right", type=int, default=50_000)
    ap.add_argument("--n-pairs", type=int, default=1_200_000, help="pair draws of make_interactions")
    ap.add_argument("--popularity", type=float, default=1.0)
    ap.add_argument("--k", type=int, default=64, help="n_components")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--gramian-weights", choices=("items", "pairs"), default="items",
                    help="TwoTower's prior: 'pairs' is the paper's (all estimators target the same G)")
    ap.add_argument("--penalty-weight", type=float, default=10.0)
    ap.add_argument("--split", choices=("distinct", "rows"), default="distinct",
                    help="90/10 split of the distinct pairs (default) or of the pair rows")
    ap.add_argument("--penalties", default=",".join(PENALTIES))
    ap.add_argument("--map-queries", type=int, default=5000,
                    help="left items whose validation pairs are ranked (0: all)")
    ap.add_argument("--n-candidates", type=int, default=None, help="default: every right item")
    ap.add_argument("--check-epochs", type=int, default=3, help="fit(n_epochs=E) vs partial_fit (0: skip)")
    ap.add_argument("--traj-steps", type=int, default=0, help="steps of the error trajectory (0: one epoch)")
    ap.add_argument("--traj-every", type=int, default=250)
    ap.add_argument("--no-trajectory", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON file for the raw results")
    args = ap.parse_args(argv)

    import similearn
    from similearn.datasets import make_interactions

    t_start = time.perf_counter()
    d = make_interactions(n_left=args.n_left, n_right=args.n_right, n_pairs=args.n_pairs,
                          popularity=args.popularity, random_state=args.seed)
    train, val, n_distinct = _split(d.pairs, args.n_right, args.seed, by=args.split)
    qpairs = _query_pairs(val, args.map_queries, args.seed)
    n_queries = np.unique(qpairs[:, 0]).size
    cand = "all right items" if args.n_candidates is None or args.n_candidates >= args.n_right \
        else f"{args.n_candidates} uniformly sampled right items (seed {args.seed}) + each query's relevant items"
    print("# TwoTower Gramian estimators: MAP@10 and Gramian error over training time\n")
    print("command: `python " + " ".join([sys.argv[0]] + (sys.argv[1:] if argv is None else list(argv))) + "`\n")
    print(f"- similearn {similearn.__version__} ({similearn.__file__}), Python {platform.python_version()}, "
          f"threads {args.threads}, seed {args.seed}")
    print(f"- data: make_interactions({args.n_left}, {args.n_right}, n_pairs={args.n_pairs}, "
          f"popularity={args.popularity}): {n_distinct} distinct pairs; 90/10 split by "
          f"{'distinct pair' if args.split == 'distinct' else 'pair row'} -> {train.shape[0]} training pair rows "
          f"(repeats kept), {val.shape[0]} validation pairs; features "
          f"{d.left_features.shape[1]} / {d.right_features.shape[1]} columns (one-hot id + cluster tags)")
    print(f"- MAP@10: validation pairs of {n_queries} left items ({qpairs.shape[0]} pairs; "
          f"{'all' if not args.map_queries else f'a fixed sample of {args.map_queries}'} query items), "
          f"candidates: {cand}, training pairs excluded")
    print(f"- model: TwoTower(n_components={args.k}, penalty=P, gramian_weights={args.gramian_weights!r}, "
          f"penalty_weight={args.penalty_weight}, random_state={args.seed}, n_threads={args.threads}), "
          "other parameters default (batch_size 256, adagrad, learning_rate auto = 0.1, "
          "gramian_rate 0.1, normalize l2); fit(n_epochs=1) then partial_fit per epoch; time = sum(epoch_times_)\n")
    sys.stdout.flush()

    results = {"settings": vars(args), "n_distinct_pairs": int(n_distinct), "n_train_rows": int(train.shape[0]),
               "n_val_pairs": int(val.shape[0]), "n_query_items": int(n_queries), "n_query_pairs": int(qpairs.shape[0]),
               "curves": {}}
    results["reference_map10"] = reference_maps(d, train, qpairs, args)
    penalties = [p.strip() for p in args.penalties.split(",") if p.strip()]
    for pen in penalties:
        results["curves"][pen], _ = train_curve(pen, d, train, qpairs, args, args.epochs)
    if args.check_epochs and "sogram" in results["curves"] and args.check_epochs <= args.epochs:
        results["continuation"] = check_continuation(d, train, qpairs, args, results["curves"]["sogram"])
    if not args.no_trajectory:
        results["trajectory"] = error_trajectory(d, train, args)
    results["total_seconds"] = time.perf_counter() - t_start

    # ---- table 1: MAP@10 over training time
    curves = results["curves"]
    print("## MAP@10 after each epoch (cumulative training seconds in parentheses)\n")
    head = ["epoch"] + list(curves)
    rows = []
    for e in range(args.epochs):
        rows.append([e + 1] + [f"{c[e]['map10']:.4f} ({c[e]['train_seconds']:.1f} s)" for c in curves.values()])
    print(_md_table(head, rows) + "\n")
    print("Per penalty: final MAP@10, best MAP@10, training seconds per epoch (median), final loss\n")
    rows = []
    for pen, c in curves.items():
        per = np.diff([0.0] + [r["train_seconds"] for r in c])
        rows.append([pen, f"{c[-1]['map10']:.4f}", f"{max(r['map10'] for r in c):.4f}", f"{np.median(per):.2f}",
                     f"{c[-1]['loss']:.4f}"])
    print(_md_table(["penalty", "final MAP@10", "best MAP@10", "s / epoch", "final loss"], rows) + "\n")
    print("Reference rankings (no training), same queries and candidates:\n")
    print(_md_table(["ranking", "MAP@10"], [[n, f"{v:.4f}"] for n, v in results["reference_map10"].items()]) + "\n")
    if "continuation" in results:
        cc = results["continuation"]
        print(f"Continuation check (sogram): fit(n_epochs={cc['epochs']}) losses "
              f"{', '.join(f'{v:.4f}' for v in cc['fit_loss_history'])}, MAP@10 {cc['fit_map10']:.4f}, "
              f"{cc['fit_train_seconds']:.1f} s; fit(1) + partial_fit losses "
              f"{', '.join(f'{v:.4f}' for v in cc['partial_loss_history'])}, MAP@10 {cc['partial_map10']:.4f}, "
              f"{cc['partial_train_seconds']:.1f} s\n")

    # ---- table 2: Gramian error along one trajectory
    if "trajectory" in results:
        tr = results["trajectory"]
        print(f"## Gramian estimation error ||Ghat - G||_F / ||G||_F along one SOGram trajectory "
              f"({tr['n_steps']} steps of batch {tr['batch_size']}, |B'| = {tr['batch_size']}; left / right)\n")
        names = list(tr["errors"])
        rows = []
        for i, (step, t) in enumerate(zip(tr["step"], tr["time"])):
            rows.append([step, f"{t:.1f}"] + [f"{tr['errors'][n][i][0]:.3f} / {tr['errors'][n][i][1]:.3f}"
                                              for n in names])
        print(_md_table(["step", "train s"] + names, rows) + "\n")
        rows = []
        for n in names:
            E = np.asarray(tr["errors"][n])
            half = E[E.shape[0] // 2:]
            rows.append([n, f"{E[-1].mean():.3f}", f"{half.mean():.3f}"])
        print("Mean of the left and right errors: at the last evaluation, and averaged over the second half\n")
        print(_md_table(["estimator", "last", "mean (2nd half)"], rows) + "\n")
        print(f"(trajectory wall time {tr['wall_seconds']:.1f} s, including the estimators' updates and "
              "the exact Gramians)\n")
    print(f"total wall time {results['total_seconds']:.1f} s")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
        print(f"raw results: {args.out}")
    return results


if __name__ == "__main__":
    main()
