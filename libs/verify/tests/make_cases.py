"""Builds the verifier's agreement case table (cases.jsonl) from the answer styles of the
seven benchmarks in ../shared/data, labelled by HF math-verify.

For a sample of gold answers of every benchmark it makes: the gold itself in a boxed
response, equivalent rewrites (spacing, \\dfrac, decimals, `x = ...`, units, reordered
sets), and wrong answers (a changed digit, a swapped tuple, a flipped interval end, an
answer only mentioned in the text). `expected` is math-verify's verdict on
(gold, boxed prediction); `intended` is what the rewrite was meant to be.

    python make_cases.py ../../../../shared/data/benchmarks > cases.jsonl
"""
import json
import random
import re
import sys

from math_verify import parse, verify

random.seed(20261129)
root = sys.argv[1]
FILES = ["math500", "aime24", "aime25", "amc23", "minerva_math", "olympiadbench", "gsm8k"]
PER_FILE = {"math500": 20, "aime24": 6, "aime25": 6, "amc23": 6, "minerva_math": 12,
            "olympiadbench": 14, "gsm8k": 8}


def mv(gold, pred_response):
    try:
        return bool(verify(parse("$" + gold + "$"), parse(pred_response)))
    except Exception:
        return False


def change_digit(s):
    digits = [i for i, c in enumerate(s) if c.isdigit()]
    if not digits:
        return None
    i = random.choice(digits)
    d = str((int(s[i]) + random.randint(1, 8)) % 10)
    return s[:i] + d + s[i + 1:]


def rewrites(g):
    out = []
    if "\\frac" in g:
        out.append((g.replace("\\frac", "\\dfrac"), True, "dfrac"))
    if " " not in g and len(g) < 40:
        out.append((" ".join(g), None, "spaced"))
    if re.fullmatch(r"-?\d+", g):
        out.append((g + ".0", True, "decimal"))
        out.append(("x = " + g, True, "assignment"))
        out.append((g + "\\text{ units}", True, "unit"))
        if len(g) > 3:
            out.append(("{:,}".format(int(g)), True, "thousands"))
    m = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", g)
    if m and int(m.group(2)) in (2, 4, 5, 8, 10, 20, 25):
        out.append((str(int(m.group(1)) / int(m.group(2))), True, "fraction-as-decimal"))
    if g.startswith("(") and "," in g:
        parts = g[1:-1].split(",")
        if len(parts) == 2:
            out.append(("(" + parts[1].strip() + ", " + parts[0].strip() + ")", None, "swapped-tuple"))
    if g.startswith("[") or g.startswith("("):
        if g.endswith("]"):
            out.append((g[:-1] + ")", None, "open-end"))
    wrong = change_digit(g)
    if wrong and wrong != g:
        out.append((wrong, False, "changed-digit"))
    return out


cases = []
for name in FILES:
    rows = [json.loads(l) for l in open(f"{root}/{name}.jsonl")]
    random.shuffle(rows)
    for r in rows[:PER_FILE[name]]:
        g = str(r["answer"]).strip()
        if not g or len(g) > 120:
            continue
        preds = [(g, True, "identical")] + rewrites(g)
        for pred, intended, kind in preds:
            response = f"Let me work through it. Therefore the answer is $\\boxed{{{pred}}}$."
            cases.append({"source": name, "id": r["id"], "kind": kind, "gold": g,
                          "pred": response, "intended": intended, "expected": mv(g, response)})
        # An answer merely mentioned, never boxed: no credit under strict extraction.
        response = f"I think it might be {g}, but I am not sure."
        cases.append({"source": name, "id": r["id"], "kind": "unboxed-mention", "gold": g,
                      "pred": response, "intended": False, "expected": False})
for c in cases:
    print(json.dumps(c))
