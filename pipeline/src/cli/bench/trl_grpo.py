"""TRL's GRPOTrainer on the prompts of a deltarl run, timed a step at a time.

Usage: python trl_grpo.py SETTINGS_JSON PROMPTS_JSONL

SETTINGS_JSON: {"model", "threads", "steps", "samples", "prompts", "micro_batch",
"max_new_tokens", "temperature", "top_p", "top_k", "lr", "weight_decay", "grad_clip",
"eps_low", "eps_high", "seed", "out"}. PROMPTS_JSONL: {"prompt": rendered text, "answer":
gold} a line, `prompts` lines a step in step order (the prompts deltarl's iterations drew,
already in the chat template, so TRL uses them as they are).

One optimizer step a generation batch (prompts x samples completions), DAPO's token-mean
loss (TRL's loss_type "dapo"), no KL (beta 0), AdamW at a constant learning rate, on CPU.
The reward: "The answer is N" (else the last number) equal to the gold, a plain Python
reading of the lenient extraction (its cost is nothing next to generation and the step).
Prints one JSON line: each step's seconds, measured by a callback from the step's
beginning to its end (generation, rewards, the loss and the optimizer step).
"""

import json
import re
import sys
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
ANSWER_IS = re.compile(r"answer is[:\s]*\$?\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


def extract(text):
    m = ANSWER_IS.findall(text)
    if m:
        return m[-1]
    m = NUMBER.findall(text)
    return m[-1] if m else None


def reward(completions, answer, **_):
    return [1.0 if extract(c) == a else -1.0 for c, a in zip(completions, answer)]


class StepTimer(TrainerCallback):
    def __init__(self):
        self.seconds, self.t0 = [], None

    def on_step_begin(self, args, state, control, **kw):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.seconds.append(time.perf_counter() - self.t0)


def main():
    s = json.load(open(sys.argv[1]))
    torch.set_num_threads(s["threads"])
    rows = [json.loads(line) for line in open(sys.argv[2])]
    data = Dataset.from_list(rows)
    batch = s["prompts"] * s["samples"]
    config = GRPOConfig(
        output_dir=s["out"],
        use_cpu=True,
        seed=s["seed"],
        max_steps=s["steps"],
        num_generations=s["samples"],
        per_device_train_batch_size=s["micro_batch"],
        gradient_accumulation_steps=batch // s["micro_batch"],
        generation_batch_size=batch,
        max_completion_length=s["max_new_tokens"],
        temperature=s["temperature"],
        top_p=s["top_p"],
        top_k=s["top_k"],
        learning_rate=s["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=s["weight_decay"],
        max_grad_norm=s["grad_clip"],
        epsilon=s["eps_low"],
        epsilon_high=s["eps_high"],
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        shuffle_dataset=False,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
    )
    tok = AutoTokenizer.from_pretrained(s["model"])
    model = AutoModelForCausalLM.from_pretrained(s["model"], dtype=torch.float32)
    timer = StepTimer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tok,
        callbacks=[timer],
    )
    trainer.train()
    print(json.dumps({"step_seconds": timer.seconds}))


if __name__ == "__main__":
    main()
