"""TRL's own GRPO loss on tensors the Rust test hands it: `GRPOTrainer._compute_loss`
called unbound on a stand-in for the trainer whose forward pass returns the given
log-probs, so the loss and its gradient are TRL's code, not a re-typing of it.

Usage: trl_loss.py CASE.json  ->  {"loss": float, "grad": [per token, flat]}
"""
import json
import sys
from collections import defaultdict
from types import SimpleNamespace

import torch
from trl.trainer.grpo_trainer import GRPOTrainer

case = json.load(open(sys.argv[1]))
lengths = case["lengths"]
B, T = len(lengths), max(lengths)
mask = torch.zeros(B, T, dtype=torch.float64)
logp = torch.zeros(B, T, dtype=torch.float64)
old = torch.zeros(B, T, dtype=torch.float64)
at = 0
for i, n in enumerate(lengths):
    mask[i, :n] = 1.0
    logp[i, :n] = torch.tensor(case["logp"][at : at + n], dtype=torch.float64)
    old[i, :n] = torch.tensor(case["old"][at : at + n], dtype=torch.float64)
    at += n
logp.requires_grad_(True)
accelerator = SimpleNamespace(
    num_processes=1,
    gather=lambda x: x,
    gather_for_metrics=lambda x: x,
    reduce=lambda x, reduction="sum": x,
    sync_gradients=True,
)
trainer = SimpleNamespace(
    _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
    aux_loss_enabled=False,
    top_entropy_quantile=1.0,
    off_policy_mask_threshold=None,
    importance_sampling_level=case["level"],
    beta=0.0,
    loss_type=case["loss_type"],
    epsilon_low=case["eps_low"],
    epsilon_high=case["eps_high"],
    args=SimpleNamespace(
        delta=None,
        sapo_temperature_pos=case["tau_pos"],
        sapo_temperature_neg=case["tau_neg"],
        use_bias_correction_kl=False,
        steps_per_generation=1,
    ),
    use_vllm=False,
    model=SimpleNamespace(training=True),
    current_gradient_accumulation_steps=1,
    accelerator=accelerator,
    _entropy_bonus_enabled=False,
    _metrics=defaultdict(lambda: defaultdict(list)),
)
inputs = {
    "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
    "prompt_mask": torch.ones(B, 1, dtype=torch.long),
    "completion_ids": torch.zeros(B, T, dtype=torch.long),
    "completion_mask": mask.long(),
    "advantages": torch.tensor(case["advantages"], dtype=torch.float64),
    "old_per_token_logps": old,
    "num_items_in_batch": mask.sum(),
}
loss = GRPOTrainer._compute_loss(trainer, None, inputs)
loss.backward()
grad = [logp.grad[i, j].item() for i, n in enumerate(lengths) for j in range(n)]
print(json.dumps({"loss": loss.item(), "grad": grad}))
