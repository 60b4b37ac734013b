# docs/results.md §10: python3 docs/pooled.py "§9 tiny-steps-varied, 20 it=-0.011,0.000,0.001,0.000,0.000,-0.008"
# Pooled analysis of DelTA - DAPO across independent settings: each setting's mean paired
# difference over seeds and its standard error s/sqrt(n); fixed-effect inverse-variance
# pooling, and a DerSimonian-Laird random-effects estimate; a sign test over settings.
import math, sys
from statistics import mean, stdev
settings = {
    "§2 tiny-steps, 20 it": [-0.003, +0.001, +0.001, +0.000, -0.020],
    # §5 is left out: its runs are the first 10 iterations of §9's seeds 1-3 (same base, config).
    "§6 compact control, 10 it": [+0.003, -0.004, -0.006, -0.002, -0.011],
}
extra = sys.argv[1:]  # "label=v1,v2,..."
for e in extra:
    k, v = e.split("=")
    settings[k] = [float(x) for x in v.split(",")]
tq = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 10: 2.228, 12: 2.179, 13: 2.160, 14: 2.145, 16: 2.120, 18: 2.101, 20: 2.086}
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
print(f"stratified paired t: {est:+.4f} +- {tq.get(dfp, 2.0)*se:.4f} (t, {dfp} df), t = {t:.2f}, p = {tcdf_two_sided(t, dfp):.3f}")
