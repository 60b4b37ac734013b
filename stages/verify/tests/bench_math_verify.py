"""Baseline of `deltarl bench verify`: HF math-verify on the committed case table.
Prints the median seconds of one pass over all cases (parse + verify, as a grader does)."""
import json
import sys
import time

from math_verify import parse, verify

cases = [json.loads(l) for l in open(sys.argv[1])]
reps = int(sys.argv[2])
times = []
for _ in range(reps):
    t = time.perf_counter()
    for c in cases:
        try:
            verify(parse("$" + c["gold"] + "$"), parse(c["pred"]))
        except Exception:
            pass
    times.append(time.perf_counter() - t)
times.sort()
print(f"{times[len(times) // 2]:.6f}")
