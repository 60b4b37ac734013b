"""Anchor of `deltarl bench rollout --engine vllm`: vLLM's own offline `LLM.generate` on
the prompts and sampling parameters the rollout stage sends its server (the same engine
flags the stage's server gets on a CPU), all prompts in one call. Prints the engine's
start-up seconds and the median tokens/s over the repetitions, after one untimed call, on
a line of its own starting `deltarl-anchor`."""
import json
import sys
import time

from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt


def main():
    model, prompts_path, n, new_tokens, reps, cpu, max_len, dtype = sys.argv[1:9]
    n, new_tokens, reps, cpu, max_len = int(n), int(new_tokens), int(reps), cpu == "1", int(max_len)
    with open(prompts_path) as f:
        prompts = json.load(f)
    t = time.perf_counter()
    # The flags the stage's server gets on a CPU (libs/vllm's server.rs says why).
    extra = {"enforce_eager": True, "gpu_memory_utilization": 0.1,
             "enable_chunked_prefill": False} if cpu else {}
    # The positions a request may use, as the stage's server is given them (0: vLLM's own).
    if max_len > 0:
        extra["max_model_len"] = max_len
    llm = LLM(model=model, dtype=dtype, seed=0, logprobs_mode="processed_logprobs", **extra)
    startup = time.perf_counter() - t
    inputs = [TokensPrompt(prompt_token_ids=ids) for ids in prompts]
    params = [
        SamplingParams(n=n, temperature=1.0, top_p=1.0, top_k=-1, max_tokens=new_tokens,
                       ignore_eos=True, seed=i, logprobs=0)
        for i in range(len(prompts))
    ]
    llm.generate(inputs, params, use_tqdm=False)
    rates = []
    for _ in range(reps):
        t = time.perf_counter()
        outs = llm.generate(inputs, params, use_tqdm=False)
        dt = time.perf_counter() - t
        rates.append(sum(len(c.token_ids) for o in outs for c in o.outputs) / dt)
    rates.sort()
    # vLLM logs to standard output too: the result line is marked.
    print(f"deltarl-anchor {startup:.3f} {rates[len(rates) // 2]:.3f}", flush=True)


# vLLM starts its engine in a spawned process, which imports this file again.
if __name__ == "__main__":
    main()
