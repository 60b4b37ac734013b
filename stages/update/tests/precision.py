"""The f32-accumulation reference for `precision.rs`: a bf16 two-layer network trained for
three steps of eight micro-batches each, the way PyTorch mixed precision with f32 master
weights does it (FSDP's f32 gradient reduction): each micro-batch's bf16 gradient is added
to an f32 sum, the global norm is clipped with `clip_grad_norm_`, `torch.optim.AdamW`
steps the f32 masters, and the bf16 weights are the masters rounded.

    python precision.py DIR

writes DIR/inputs.safetensors (initial weights, inputs, loss scales) and
DIR/reference.safetensors (the masters after each step's f32 accumulation, and the same
run with the micro-batch gradients summed in bf16 instead, to show the difference matters).
"""

import sys

import torch
from safetensors.torch import save_file

STEPS, MICRO = 3, 8
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 0.5


def inputs():
    g = torch.Generator().manual_seed(7)
    bf = lambda *shape, s=1.0: (torch.randn(*shape, generator=g) * s).bfloat16().float()
    return {
        "w1": bf(16, 32, s=0.3),
        "w2": bf(32, 8, s=0.3),
        "x": bf(STEPS * MICRO, 4, 16),
        # One large micro-batch and seven much smaller ones per step.
        "scale": torch.tensor([1.0 if k % MICRO == 0 else 2.0 ** -7 for k in range(STEPS * MICRO)]),
    }


def train(data, f32_sums):
    w = [data["w1"].bfloat16().requires_grad_(), data["w2"].bfloat16().requires_grad_()]
    masters = [t.detach().float().clone() for t in w]
    opt = torch.optim.AdamW(masters, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    for step in range(STEPS):
        sums = [torch.zeros_like(m) for m in masters]
        for k in range(step * MICRO, (step + 1) * MICRO):
            x = data["x"][k].bfloat16()
            loss = (torch.tanh(x @ w[0]) @ w[1]).float().pow(2).mean() * data["scale"][k]
            loss.backward()
            for i, p in enumerate(w):
                if f32_sums:
                    sums[i] += p.grad.float()
                    p.grad = None
        for i, (m, p) in enumerate(zip(masters, w)):
            m.grad = sums[i] if f32_sums else p.grad.float()
            p.grad = None
        torch.nn.utils.clip_grad_norm_(masters, CLIP)
        opt.step()
        with torch.no_grad():
            for m, p in zip(masters, w):
                p.copy_(m.bfloat16())
    return masters


def main():
    torch.set_num_threads(1)
    out = sys.argv[1]
    data = inputs()
    save_file(data, f"{out}/inputs.safetensors")
    f32 = train(data, True)
    bf16 = train(data, False)
    save_file(
        {"w1": f32[0], "w2": f32[1], "bf16_w1": bf16[0], "bf16_w2": bf16[1]},
        f"{out}/reference.safetensors",
    )


if __name__ == "__main__":
    main()
