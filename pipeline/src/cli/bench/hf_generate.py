"""Baseline of `deltarl bench rollout`: transformers' generate on the same checkpoint,
same torch build, same thread count, same precision, same prompts (each repeated for its samples, left
padded to the longest with an attention mask when their lengths differ, as transformers
batches decoder-only prompts) and lengths. Prints the median tokens/s over the
repetitions."""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM

model_dir, prompts_path, batch, new_tokens, threads, reps, dtype = sys.argv[1:8]
batch, new_tokens, threads, reps = map(int, (batch, new_tokens, threads, reps))
with open(prompts_path) as f:
    prompts = json.load(f)
longest = max(len(p) for p in prompts)
torch.set_num_threads(threads)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
rows = [p for p in prompts for _ in range(batch)]
ids = torch.tensor([[0] * (longest - len(p)) + p for p in rows], dtype=torch.long)
mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in rows], dtype=torch.long)
rates = []
with torch.inference_mode():
    for _ in range(reps):
        t = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             pad_token_id=0)
        dt = time.perf_counter() - t
        rates.append(ids.shape[0] * (out.shape[1] - longest) / dt)
rates.sort()
print(f"{rates[len(rates) // 2]:.3f}")
