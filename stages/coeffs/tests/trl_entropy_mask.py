"""TRL's own token selection for `top_entropy_quantile` on entropies the Rust test hands
it: `GRPOTrainer.get_high_entropy_mask` called unbound on a stand-in for the trainer with
one process (its gather and padding are the identity), so the selection is TRL's code.

Usage: trl_entropy_mask.py CASES.json  ->  [[[0|1 per token] per response] per case]
CASES: [{"entropies": [[float per token] per response], "top_entropy_quantile": float}]
"""
import json
import sys
from types import SimpleNamespace

import torch
from trl.trainer.grpo_trainer import GRPOTrainer

accelerator = SimpleNamespace(
    pad_across_processes=lambda x, dim=0, pad_index=0: x,
    gather=lambda x: x,
)
trainer = SimpleNamespace(accelerator=accelerator)


def select(case):
    rows = case["entropies"]
    B, T = len(rows), max(len(r) for r in rows)
    entropies = torch.zeros(B, T, dtype=torch.float32)
    mask = torch.zeros(B, T, dtype=torch.long)
    for i, r in enumerate(rows):
        entropies[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
        mask[i, : len(r)] = 1
    # As TRL's _compute_loss calls it: the threshold is 1 - top_entropy_quantile.
    selected = GRPOTrainer.get_high_entropy_mask(
        trainer, entropies, mask, 1 - case["top_entropy_quantile"]
    )
    return [[int(selected[i, t]) for t in range(len(r))] for i, r in enumerate(rows)]


print(json.dumps([select(c) for c in json.load(open(sys.argv[1]))]))
