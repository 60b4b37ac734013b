"""Baseline of `deltarl bench verify`: HF math-verify on a case file.

    bench_math_verify.py FILE REPS     median seconds of one pass over all cases
                                       (parse + verify, as a grader does)
    bench_math_verify.py verdicts FILE math-verify's verdict on each case, as a JSON list
"""
import json
import sys
import time

from math_verify import parse, verify


def grade(c):
    try:
        return bool(verify(parse("$" + c["gold"] + "$"), parse(c["pred"])))
    except Exception:
        return False


if sys.argv[1] == "verdicts":
    cases = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    print(json.dumps([grade(c) for c in cases]))
    sys.exit(0)

cases = [json.loads(l) for l in open(sys.argv[1])]
reps = int(sys.argv[2])
times = []
for _ in range(reps):
    t = time.perf_counter()
    for c in cases:
        grade(c)
    times.append(time.perf_counter() - t)
times.sort()
print(f"{times[len(times) // 2]:.6f}")
