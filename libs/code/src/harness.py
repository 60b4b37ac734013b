# The test harness: runs inside the sandbox, reads one job as JSON on stdin
# ({"nonce", "program", "tests", "case_timeout", "run_all"}), and reports one line per case
# on what was its stdout ("<nonce> case {...}"), then "<nonce> done". The program's own
# stdin, stdout and stderr go nowhere, so nothing it prints can pass for a report, and only
# this process reports (not a child the program forks). A program that sets out to forge
# its verdict by inspecting the harness it runs inside could (as with HumanEval's own
# harness): the sandbox guards the host, the nonce and these rules the ordinary cases.
import copy, json, math, os, signal, subprocess, sys

job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
NONCE = job["nonce"]
report_fd = os.dup(1)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
sys.stdin = open(os.devnull)
sys.stdout = sys.stderr = open(os.devnull, "w")


HARNESS_PID = os.getpid()


def say(text):
    if os.getpid() != HARNESS_PID:
        return
    data = (NONCE + " " + text + "\n").encode("utf-8", "replace")
    while data:
        data = data[os.write(report_fd, data):]


say("ready")


class Timeout(BaseException):
    pass


def on_alarm(signum, frame):
    raise Timeout()


signal.signal(signal.SIGALRM, on_alarm)
T = float(job["case_timeout"])


def timed(fn):
    signal.setitimer(signal.ITIMER_REAL, T)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def brief(e):
    text = (type(e).__name__ + ": " + str(e)).strip().rstrip(":")
    return text[:300]


def kind_of(e, assertion="wrong_answer"):
    if isinstance(e, Timeout):
        return "time_limit"
    if isinstance(e, MemoryError):
        return "memory_limit"
    if isinstance(e, AssertionError):
        return assertion
    return "runtime_error"


def case(i, outcome, detail=None):
    say("case " + json.dumps({"i": i, "outcome": outcome, "detail": detail}))
    return outcome == "passed" or job["run_all"]


def load(program):
    """Compiles and runs the program's top level; (namespace, None) or (None, failure)."""
    try:
        code = compile(program, "program.py", "exec")
    except BaseException as e:
        return None, ("runtime_error", brief(e))
    ns = {"__name__": "program", "__builtins__": __builtins__}
    try:
        timed(lambda: exec(code, ns))
    except BaseException as e:
        return None, (kind_of(e, "runtime_error"), brief(e))
    return ns, None


def asserts(t, program):
    ns, failed = load(program)
    if failed:
        case(0, *failed)
        return
    if t.get("setup"):
        try:
            exec(t["setup"], ns)
        except BaseException as e:
            case(0, "runtime_error", "setup: " + brief(e))
            return
    for i, src in enumerate(t["cases"]):
        try:
            timed(lambda: exec(compile(src, "test_%d" % i, "exec"), ns))
        except BaseException as e:
            if not case(i, kind_of(e), brief(e)):
                return
        else:
            case(i, "passed")


def plain(x):
    """Tuples as lists, so results compare as the JSON they are checked against."""
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


def same(got, want):
    got = plain(got)
    if isinstance(want, float) or isinstance(got, float):
        try:
            return math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-6)
        except (TypeError, ValueError):
            return False
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return all(same(g, w) for g, w in zip(got, want))
    return got == want


def call(t, program):
    ns, failed = load(program)
    if failed:
        case(0, *failed)
        return
    name = t["fn_name"]
    fn = ns.get(name)
    if fn is None and isinstance(ns.get("Solution"), type):
        try:
            fn = getattr(ns["Solution"](), name, None)
        except BaseException as e:
            case(0, kind_of(e, "runtime_error"), brief(e))
            return
    if not callable(fn):
        case(0, "runtime_error", "no function %r" % name)
        return
    for i, c in enumerate(t["cases"]):
        args, want = copy.deepcopy(c["args"]), c["output"]
        try:
            got = timed(lambda: fn(*args))
        except BaseException as e:
            if not case(i, kind_of(e, "runtime_error"), brief(e)):
                return
            continue
        # TACO and APPS wrap a return value in a list of one.
        ok = same(got, want) or (isinstance(want, list) and len(want) == 1 and same(got, want[0]))
        if ok:
            case(i, "passed")
        elif not case(i, "wrong_answer", ("got %r" % (got,))[:300]):
            return


def normal(text):
    lines = [l.rstrip() for l in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def stdio(t, program):
    try:
        compile(program, "program.py", "exec")
    except BaseException as e:
        case(0, "runtime_error", brief(e))
        return
    with open("/tmp/program.py", "w") as f:
        f.write(program)
    for i, c in enumerate(t["cases"]):
        with open("/tmp/stdout", "wb") as out, open("/tmp/stderr", "wb") as err:
            p = subprocess.Popen(
                [sys.executable, "/tmp/program.py"], stdin=subprocess.PIPE, stdout=out,
                stderr=err, close_fds=True, start_new_session=True, cwd="/tmp")
            try:
                p.communicate(c["input"].encode(), timeout=T)
                timeout = False
            except subprocess.TimeoutExpired:
                timeout = True
            except BrokenPipeError:
                timeout = False
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        with open("/tmp/stderr", "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode("utf-8", "replace").strip().splitlines()
        with open("/tmp/stdout", "rb") as f:
            got = f.read(1 << 24).decode("utf-8", "replace")
        if timeout or p.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            outcome, detail = "time_limit", None
        elif p.returncode != 0:
            memory = any("MemoryError" in l for l in tail)
            outcome = "memory_limit" if memory else "runtime_error"
            detail = (tail[-1] if tail else "exit code %d" % p.returncode)[:300]
        elif normal(got) == normal(c["output"]):
            outcome, detail = "passed", None
        else:
            want = normal(c["output"])
            have = normal(got)
            k = next((j for j in range(max(len(want), len(have)))
                      if j >= len(want) or j >= len(have) or want[j] != have[j]), 0)
            detail = ("line %d: got %r, expected %r" % (
                k + 1, have[k] if k < len(have) else "<end>",
                want[k] if k < len(want) else "<end>"))[:300]
            outcome = "wrong_answer"
        if not case(i, outcome, detail):
            return


kind, t = next(iter(job["tests"].items()))
{"asserts": asserts, "call": call, "stdio": stdio}[kind](t, job["program"])
say("done")
