# docs/results.md §10: python3 docs/pooled.py "LABEL=d1,d2,..." ... (one argument a setting,
# its per-seed DelTA - DAPO differences; the command in §10 gives the page's three).
# Pooled analysis of DelTA - DAPO across independent settings: each setting's mean paired
# difference over seeds and its standard error s/sqrt(n); fixed-effect inverse-variance
# pooling, and a DerSimonian-Laird random-effects estimate; a sign test over settings.
import math, sys
from statistics import mean, stdev
settings = {}
for e in sys.argv[1:]:
    k, v = e.split("=")
    settings[k] = [float(x) for x in v.split(",")]
if len(settings) < 2:
    sys.exit("give two settings or more: LABEL=d1,d2,...")
rows = []
for k, xs in settings.items():
    m, s = mean(xs), stdev(xs)
    se = s / math.sqrt(len(xs))
    rows.append((k, len(xs), m, se))
    print(f"{k}: n={len(xs)} mean={m:+.4f} se={se:.4f}")
w = [1 / se**2 for *_, se in rows]
fe = sum(wi * m for wi, (_, _, m, _) in zip(w, rows)) / sum(w)
fe_se = math.sqrt(1 / sum(w))
q = sum(wi * (m - fe) ** 2 for wi, (_, _, m, _) in zip(w, rows))
df = len(rows) - 1
tau2 = max(0.0, (q - df) / (sum(w) - sum(wi * wi for wi in w) / sum(w)))
wr = [1 / (se**2 + tau2) for *_, se in rows]
re = sum(wi * m for wi, (_, _, m, _) in zip(wr, rows)) / sum(wr)
re_se = math.sqrt(1 / sum(wr))
print(f"fixed effect: {fe:+.4f} +- {1.96*fe_se:.4f} (z 95%), Q={q:.2f} on {df} df, tau^2={tau2:.2e}")
print(f"random effects (DL): {re:+.4f} +- {1.96*re_se:.4f}")
neg = sum(1 for *_, m, _ in rows if m < 0)
n = len(rows)
p = min(1.0, 2 * sum(math.comb(n, k) for k in range(neg, n + 1)) / 2**n) if neg > n / 2 else 1.0
print(f"settings with a negative mean: {neg} of {n}; exact two-sided sign test p = {p:.3f}")
allx = [x for xs in settings.values() for x in xs]
print(f"all {len(allx)} seeds pooled as one sample: mean {mean(allx):+.4f}")
# Stratified paired t: each setting keeps its own mean; the seed-to-seed variance is pooled
# within settings (common variance assumed), so the estimate is the seed-weighted mean of
# the settings' means with N - k degrees of freedom.
N = len(allx); k = len(rows)
sp2 = sum((len(xs) - 1) * stdev(xs) ** 2 for xs in settings.values()) / (N - k)
est = sum(len(xs) * mean(xs) for xs in settings.values()) / N
se = math.sqrt(sp2 / N)
dfp = N - k
t = est / se
# two-sided p from the t distribution (numerical integration of the density)
def tcdf_two_sided(t, df):
    f = lambda x: math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2)) * (1 + x * x / df) ** (-(df + 1) / 2)
    a, n = abs(t), 20000
    h = a / n
    s = sum(f(i * h) * (1 if i in (0, n) else (4 if i % 2 else 2)) for i in range(n + 1)) * h / 3
    return 1 - 2 * s
def t975(df):
    lo, hi = 0.0, 20.0  # the 97.5 % quantile: two-sided p = 0.05, by bisection
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tcdf_two_sided(mid, df) > 0.05 else (lo, mid)
    return (lo + hi) / 2
print(f"stratified paired t: {est:+.4f} +- {t975(dfp)*se:.4f} (t, {dfp} df), t = {t:.2f}, p = {tcdf_two_sided(t, dfp):.3f}")
