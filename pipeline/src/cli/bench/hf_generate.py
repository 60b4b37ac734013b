"""Baseline of `deltarl bench rollout`: transformers' generate on the same checkpoint,
same torch build, same thread count, same prompts (each repeated for its samples) and
lengths. Prints the median tokens/s over the repetitions."""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM

model_dir, prompts_path, batch, new_tokens, threads, reps = sys.argv[1:7]
batch, new_tokens, threads, reps = map(int, (batch, new_tokens, threads, reps))
with open(prompts_path) as f:
    prompts = json.load(f)
prompt_len = len(prompts[0])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
ids = torch.tensor([p for p in prompts for _ in range(batch)], dtype=torch.long)
rates = []
with torch.inference_mode():
    for _ in range(reps):
        t = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             pad_token_id=0)
        dt = time.perf_counter() - t
        rates.append(ids.shape[0] * (out.shape[1] - prompt_len) / dt)
rates.sort()
print(f"{rates[len(rates) // 2]:.3f}")
