"""deltarl's command-line tools, carried as compiled binaries inside this package.

`pip install` puts a `deltarl` (and `deltarl-report`, when the wheel has it) command on
PATH whose entry point is `main` below: it executes the binary in `bin/` with

* libtorch found inside the installed `torch` package (the one this interpreter imports),
  through LD_LIBRARY_PATH; the binaries' own RUNPATH also points at `../../torch/lib`,
  which is where torch sits when both packages share a site-packages folder;
* `DELTARL_HOME` set to this folder, so that `--config configs/tiny-arith.toml` and the
  other configurations the wheel ships are found when the working directory has none;
* `DELTARL_PYTHON` set to this interpreter unless already set (the benchmarks' Python).

The binary is not a Python extension: nothing here imports torch, so starting a command
costs one interpreter start.
"""

import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _torch_lib():
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        sys.exit(
            "deltarl: the `torch` package is not installed in this environment "
            f"({sys.executable}); deltarl runs on its libtorch: pip install torch"
        )
    lib = os.path.join(locations[0], "lib")
    if not os.path.isdir(lib):
        sys.exit(f"deltarl: {lib} is missing: the installed torch has no libtorch folder")
    return lib


def _exec(name):
    exe = os.path.join(_HERE, "bin", name)
    if not os.path.isfile(exe):
        sys.exit(f"deltarl: {exe} is not in this wheel")
    env = dict(os.environ)
    lib = _torch_lib()
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = lib + (os.pathsep + old if old else "")
    env["DELTARL_HOME"] = _HERE
    env.setdefault("DELTARL_PYTHON", sys.executable)
    os.execve(exe, [exe] + sys.argv[1:], env)


def main():
    """The `deltarl` command."""
    _exec("deltarl")


def report_main():
    """The `deltarl-report` command (the polars report tool)."""
    _exec("deltarl-report")
