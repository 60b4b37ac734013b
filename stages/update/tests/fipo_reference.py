"""Runs FIPO's weight function as ms-swift implements it (`_compute_fipo_influence` of
`swift/rlhf_trainers/grpo_trainer.py`, the FIPO port merged into ms-swift) on the cases of
`fipo_cases()` and writes the weights to `fipo_reference.json`, which `fipo.rs` compares
with deltarl's `FutureKl::weights`. The function is read from a checkout given on the
command line and run as it is there (on a stand-in for the trainer that holds its
settings), never copied here:

    git clone https://github.com/modelscope/ms-swift /tmp/ms-swift
    python fipo_reference.py /tmp/ms-swift > fipo_reference.json

(the file here was made from commit 3602360a562313afbf2ef6065fdf61f271a2c5b9). Needs torch.
Inputs are float64, so the reference computes in float64.
"""
import ast
import json
import random
import sys
from types import SimpleNamespace
from typing import Dict, Tuple

import torch


def reference_function(checkout):
    path = checkout + "/swift/rlhf_trainers/grpo_trainer.py"
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_compute_fipo_influence":
            namespace = {"torch": torch, "Tuple": Tuple, "Dict": Dict}
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), namespace)
            return namespace["_compute_fipo_influence"]
    raise SystemExit(f"{path}: no _compute_fipo_influence")


def fipo_cases():
    """Responses of 1 to 150 tokens (longer than the reference's 128-token chunks), log
    ratios spread so some ratios pass the safety threshold and the dual clip, advantages
    of both signs."""
    rng = random.Random(20261202)
    cases = []
    for settings in [
        dict(decay_rate=32.0, clip_range=0.2, clip_high_only=True, safety=4.0, delta=10.0),
        dict(decay_rate=8.0, clip_range=0.2, clip_high_only=False, safety=None, delta=None),
        dict(decay_rate=2.0, clip_range=0.0, clip_high_only=True, safety=2.0, delta=3.0),
    ]:
        lengths = [1, 7, 150, 40, 3]
        log_ratio, adv = [], []
        for n in lengths:
            a = rng.choice([1.3, -0.8, 0.5, -2.0])
            for _ in range(n):
                x = rng.gauss(0.0, 0.05)
                if rng.random() < 0.05:
                    x = rng.choice([1.0, 2.5, -1.5])
                log_ratio.append(x)
                adv.append(a)
        cases.append(dict(settings=settings, lengths=lengths, log_ratio=log_ratio, adv=adv))
    return cases


def main():
    fn = reference_function(sys.argv[1])
    out = []
    for case in fipo_cases():
        st = case["settings"]
        lengths = case["lengths"]
        B, T = len(lengths), max(lengths)
        lr = torch.zeros(B, T, dtype=torch.float64)
        adv = torch.zeros(B, T, dtype=torch.float64)
        mask = torch.zeros(B, T, dtype=torch.bool)
        at = 0
        for i, n in enumerate(lengths):
            lr[i, :n] = torch.tensor(case["log_ratio"][at : at + n], dtype=torch.float64)
            adv[i, :n] = torch.tensor(case["adv"][at : at + n], dtype=torch.float64)
            mask[i, :n] = True
            at += n
        trainer = SimpleNamespace(
            args=SimpleNamespace(delta=st["delta"]),
            fipo_gamma=2 ** (-1 / st["decay_rate"]),
            fipo_clip_range=st["clip_range"],
            fipo_clip_high_only=st["clip_high_only"],
            fipo_safety_threshold=st["safety"],
        )
        weights, _ = fn(trainer, lr, torch.exp(lr), adv, mask)
        case["weights"] = [float(weights[i, t]) for i, n in enumerate(lengths) for t in range(n)]
        out.append(case)
    sys.stdout.write('{"reference": "modelscope/ms-swift", "cases": [\n')
    sys.stdout.write(",\n".join(json.dumps(c) for c in out))
    sys.stdout.write("\n]}\n")


if __name__ == "__main__":
    main()
