"""TwoTower's recommender calls (issue 32): what fold-in is worth for users the model never
saw, and what the serving calls cost.

    flock /tmp/bench.lock python bench/twotower_serving.py --out bench/results/twotower_serving.json

Data: make_interactions(n_left=6000, n_right=4000, n_pairs=150000, random_state=0).  500
left rows are held out of training; each held-out user's pairs are split in two halves:
"seen" (what the user gives the model) and "test" (what MAP@10 looks for, seen items
excluded from the ranking).  Quality (MAP@10 over the held-out users, all items candidates):

- ``fold_in``: one-hot id towers trained without the held-out users, each new user folded
  in from its seen half (:meth:`TwoTower.fold_in`);
- ``trained rows``: the same model trained with the held-out users' seen halves as pairs
  (their rows learnt by training: what fold-in stands in for);
- ``left_features``: side-feature left tower trained without them, new users embedded
  from their features (``recommend(left_features=..., seen=...)``);
- ``popularity``: items by training pair count.

Timings (median of --reps runs after a warm-up, 1 and 2 threads, n_components=64):
fold_in of the 500 users and of 5,000 users, recommend for 1,000 fitted users with and
without filters, similar_items for 1,000 items.  Other processes share the machine:
figures are noisy; compare ratios within one run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from similearn import TwoTower
from similearn.datasets import make_interactions
from similearn.metrics import interaction_map_at_k

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hamming_index_study import cpu_name, timed  # noqa: E402


def split_users(d, n_held, rng):
    """Held-out users (remapped to 0..n_held-1) with their seen / test halves, and the
    training users' pairs remapped to 0..n_train-1."""
    users = rng.permutation(d.left_features.shape[0])
    held, train = np.sort(users[:n_held]), np.sort(users[n_held:])
    new_id = np.full(users.size, -1)
    new_id[train] = np.arange(train.size)
    held_id = np.full(users.size, -1)
    held_id[held] = np.arange(held.size)
    P = d.pairs
    tr = P[new_id[P[:, 0]] >= 0]
    tr = np.stack([new_id[tr[:, 0]], tr[:, 1]], 1)
    hp = P[held_id[P[:, 0]] >= 0]
    hp = np.stack([held_id[hp[:, 0]], hp[:, 1]], 1)
    half = rng.random(len(hp)) < 0.5
    return train, held, tr, hp[half], hp[~half]


def as_csr(pairs, n_rows, n_cols):
    return sp.csr_matrix((np.ones(len(pairs), np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n_rows, n_cols))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    d = make_interactions(n_left=6000, n_right=4000, n_pairs=150000, random_state=0)
    n_right = d.right_features.shape[0]
    train, held, tr, seen_p, test_p = split_users(d, 500, rng)
    seen = as_csr(seen_p, held.size, n_right)
    kw = dict(n_components=64, random_state=0)
    res = {"cpu": cpu_name(), "data": "make_interactions(6000, 4000, 150000, random_state=0), 500 held-out users",
           "quality_map10": {}, "seconds": {}}

    m_id = TwoTower(**kw).fit(train.size, n_right, tr)
    U_fold = m_id.fold_in(seen)
    q = res["quality_map10"]
    q["fold_in"] = interaction_map_at_k(U_fold, m_id.right_embedding_, test_p, exclude_pairs=seen_p)
    both = np.concatenate([tr, seen_p + [train.size, 0]])
    m_all = TwoTower(**kw).fit(train.size + held.size, n_right, both)
    q["trained rows"] = interaction_map_at_k(np.ascontiguousarray(m_all.left_embedding_[train.size:]),
                                             m_all.right_embedding_, test_p, exclude_pairs=seen_p)
    m_side = TwoTower(**kw).fit(d.left_features[train], d.right_features, tr)
    U_side = m_side.transform_left(d.left_features[held])
    q["left_features"] = interaction_map_at_k(U_side, m_side.right_embedding_, test_p, exclude_pairs=seen_p)
    pop = np.bincount(tr[:, 1], minlength=n_right).astype(np.float64)
    q["popularity"] = interaction_map_at_k(np.ones((held.size, 1)), pop[:, None], test_p, exclude_pairs=seen_p)
    print(json.dumps(q, indent=1), flush=True)

    many = as_csr(tr[tr[:, 0] < 5000], 5000, n_right)
    rows = np.arange(1000)
    allow_10 = rng.choice(n_right, n_right // 10, replace=False)
    per_user = sp.random(1000, n_right, density=0.01, format="csr", random_state=1)
    deny_50 = rng.choice(n_right, 50, replace=False)
    def sec(fn):
        return timed(fn, args.reps)[0]

    for nt in (1, 2):
        m_id.set_params(n_threads=nt)
        t = res["seconds"][f"{nt} threads"] = {}
        t["fold_in 500 users"] = sec(lambda: m_id.fold_in(seen))
        t["fold_in 5000 users"] = sec(lambda: m_id.fold_in(many))
        t["recommend 1000"] = sec(lambda: m_id.recommend(rows, 10))
        t["recommend 1000 items=10% ids"] = sec(lambda: m_id.recommend(rows, 10, items=allow_10))
        t["recommend 1000 items=1% per user (CSR)"] = sec(lambda: m_id.recommend(rows, 10, items=per_user))
        t["recommend 1000 exclude=50 ids"] = sec(lambda: m_id.recommend(rows, 10, exclude=deny_50))
        t["recommend seen= 500 new users (fold-in + search)"] = sec(lambda: m_id.recommend(seen=seen, k=10))
        t["similar_items 1000 cosine"] = sec(lambda: m_id.similar_items(rows, 10))
        t["similar_items 1000 ip"] = sec(lambda: m_id.similar_items(rows, 10, metric="ip"))
        print(nt, json.dumps(t, indent=1), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
