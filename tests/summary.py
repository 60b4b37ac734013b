"""Reads `cargo test --no-fail-fast` output on stdin, passes it through, and ends with one
summary line: tests passed, failed (each named, with its test binary), ignored, and the
binaries that did not build or run. Exits non-zero when anything failed.

    cargo test --no-fail-fast 2>&1 | python3 tests/summary.py
"""
import re
import sys

RUNNING = re.compile(r"^\s+Running (?:unittests )?(\S+) \(")
DOCTESTS = re.compile(r"^\s+Doc-tests (\S+)")
RESULT = re.compile(
    r"^test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured"
)
FAILED_TEST = re.compile(r"^test (\S+) \.\.\. FAILED")
CARGO_FAILED = re.compile(r"^error: (\d+) targets? failed:")
TARGET = re.compile(r"^\s+`([^`]+)`")


def main():
    binary = "?"
    passed = failed = ignored = binaries = 0
    names = []
    not_run = []
    in_cargo_failed = False
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
        line = line.rstrip("\n")
        m = RUNNING.match(line) or DOCTESTS.match(line)
        if m:
            binary = m.group(1)
            continue
        m = FAILED_TEST.match(line)
        if m:
            names.append(f"{m.group(1)} ({binary})")
            continue
        m = RESULT.match(line)
        if m:
            binaries += 1
            passed += int(m.group(2))
            failed += int(m.group(3))
            ignored += int(m.group(4))
            continue
        if CARGO_FAILED.match(line):
            in_cargo_failed = True
            continue
        if in_cargo_failed:
            m = TARGET.match(line)
            if m:
                not_run.append(m.group(1))
                continue
            in_cargo_failed = False
        if line.startswith("error: could not compile") or line.startswith("error[E"):
            not_run.append(line)
    parts = [f"{passed} passed", f"{failed} failed", f"{ignored} ignored"]
    text = f"make test: {', '.join(parts)} in {binaries} test binaries"
    if names:
        text += "; failed: " + "; ".join(names)
    if not names and not_run:
        # Targets that failed without a failed test: they crashed or did not build.
        text += "; did not finish: " + "; ".join(not_run)
    ok = failed == 0 and not names and not not_run and binaries > 0
    print(("PASSED " if ok else "FAILED ") + text)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
