"""Straightforward numpy implementation of DelTA coefficients (docs/method.md §4).

Used (1) to produce the golden numbers of the hand-checkable case in `delta_math.rs`
(run `python reference.py`), and (2) as the numpy baseline of `deltarl bench coeffs`
(`python reference.py bench N D`).
"""
import sys
import time

import numpy as np

EPS = 1e-8


def delta(v, adv, K=1, lam_min=0.8, lam_max=1.2):
    """v: (n, d) token features; adv: (n,) advantage of each token's response."""
    v = v.astype(np.float64)
    adv = adv.astype(np.float64)
    P, N = adv > 0, adv < 0

    def cents(w):
        wp, wn = w * adv * P, w * -adv * N
        mp = (wp[:, None] * v).sum(0) / max(wp.sum(), EPS)
        mn = (wn[:, None] * v).sum(0) / max(wn.sum(), EPS)
        return mp, mn

    def margins(mp, mn):
        dp = ((v - mp) ** 2).sum(1)
        dn = ((v - mn) ** 2).sum(1)
        return np.where(P, dn - dp, dp - dn)

    def gam(m):
        gp = np.sqrt(max(m[P].var() if P.any() else 0.0, 1e-8))
        gn = np.sqrt(max(m[N].var() if N.any() else 0.0, 1e-8))
        return gp, gn

    mp, mn = cents(np.ones(len(v)))
    init = (mp, mn)
    gp, gn = gam(margins(mp, mn))
    for _ in range(K):
        # Assign with the gamma carried in, refit, then gamma from this pass's margins.
        m = margins(mp, mn)
        r = 1 / (1 + np.exp(-m / np.where(P, gp, gn)))
        mp, mn = cents(r)
        gp, gn = gam(m)
    m = margins(mp, mn)
    s = 1 / (1 + np.exp(-m / np.where(P, gp, gn)))
    c = np.where(P | N, lam_min + (lam_max - lam_min) * s, lam_min)
    g = len(c) / c.sum()
    return dict(init=init, final=(mp, mn), gamma=(gp, gn), margins=m, norm=g, coeff=g * c)


def hand_case(K=1):
    # Response 0 (A = +1): tokens (1,0) (0,1) (1,1); response 1 (A = -1): (0,0) (2,0) (0,-1).
    v = np.array([[1, 0], [0, 1], [1, 1], [0, 0], [2, 0], [0, -1]], dtype=np.float64)
    adv = np.array([1, 1, 1, -1, -1, -1], dtype=np.float64)
    out = delta(v, adv, K=K)
    np.set_printoptions(precision=12)
    for k, val in out.items():
        print(k, repr(val))


def check(path):
    """Reads a JSON case (features, advantages, K, lam) and prints the coefficients and
    gammas as JSON: the cross-check of the Rust implementation in delta_math.rs."""
    import json

    case = json.load(open(path))
    v = np.array(case["features"], dtype=np.float64).reshape(-1, case["dim"])
    out = delta(v, np.array(case["adv"]), K=case["K"], lam_min=case["lam_min"], lam_max=case["lam_max"])
    print(json.dumps({"coeff": out["coeff"].tolist(), "gamma": list(out["gamma"])}))


def bench(n, d, reps=5):
    rng = np.random.default_rng(0)
    v = rng.standard_normal((n, d)).astype(np.float32)
    adv = np.repeat(rng.standard_normal(n // 500 + 1), 500)[:n].astype(np.float32)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        delta(v, adv)
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"{times[len(times) // 2]:.6f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "bench":
        bench(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        hand_case(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
