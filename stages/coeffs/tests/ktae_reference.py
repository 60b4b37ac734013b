"""Runs KTAE's own code (the authors' `verl/workers/actor/compute_key_tokens.py`) on the
groups of `ktae_cases()` and writes its key-token scores to `ktae_reference.json`, which
`ktae.rs` compares with deltarl's estimator. Their code is imported from a checkout given
on the command line, never copied here:

    git clone https://github.com/xiaolizh1/KTAE /tmp/KTAE
    python ktae_reference.py /tmp/KTAE > ktae_reference.json

(the file here was made from commit ea9fb77f366216d754e2368653911724e73a7376).

It needs torch and transformers (the module imports transformers), as the deltarl venv has.
The reference computes in float32 and zeroes token id 151643 (Qwen2.5's end of text), so
the cases end finished responses with that id and pad with it behind a mask, as a Qwen
rollout does.
"""
import importlib.util
import json
import random
import sys

import torch

END = 151643


def ktae_cases():
    """Prompt groups: (rewards, responses as token-id lists). Small vocabularies so ids
    repeat within and across responses; some responses cut off (no end token); group
    sizes 2 to 16; balanced splits (a symmetric hypergeometric, where ties are exact) and
    unbalanced ones; graded rewards (an overlong penalty keeps a right answer below 1)."""
    rng = random.Random(20261202)
    cases = []
    for g, n_right, vocab, graded in [
        (2, 1, 6, False),
        (4, 2, 8, False),
        (4, 1, 12, False),
        (8, 4, 10, False),
        (8, 3, 20, False),
        (8, 6, 15, True),
        (16, 8, 30, False),
        (16, 5, 25, True),
        (6, 3, 5, False),
    ]:
        rewards = [1.0] * n_right + [-1.0] * (g - n_right)
        if graded:
            rewards[0] = 0.4
            rewards[-1] = -1.3
        rng.shuffle(rewards)
        responses = []
        for r in rewards:
            # Right responses lean on the low ids, wrong ones on the high ones.
            n = rng.randint(3, 14)
            ids = []
            for _ in range(n):
                if rng.random() < 0.35:
                    ids.append(rng.randrange(vocab // 2) if r > 0 else vocab // 2 + rng.randrange(vocab - vocab // 2))
                else:
                    ids.append(rng.randrange(vocab))
            ids = [100 + i for i in ids]
            if rng.random() < 0.8:
                ids.append(END)
            responses.append(ids)
        cases.append((rewards, responses))
    return cases


def main():
    path = sys.argv[1] + "/verl/workers/actor/compute_key_tokens.py"
    spec = importlib.util.spec_from_file_location("compute_key_tokens", path)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    out = []
    for settings in [
        dict(alpha=1.0, beta_ig=1.0, gamma_tf=1.0, top=1.0),
        dict(alpha=1.0, beta_ig=2.0, gamma_tf=0.0, top=0.5),
    ]:
        for rewards, responses in ktae_cases():
            width = max(len(r) for r in responses)
            ids = torch.full((len(responses), width), END, dtype=torch.long)
            mask = torch.zeros((len(responses), width), dtype=torch.long)
            for i, r in enumerate(responses):
                ids[i, : len(r)] = torch.tensor(r)
                mask[i, : len(r)] = 1
            keys = ref.ComputeKeyTokens(
                alpha=settings["alpha"],
                beta_ig=settings["beta_ig"],
                gamma_tf=settings["gamma_tf"],
                top=settings["top"],
                bottom=-1.0,
                responses_ids=ids,
                mask=mask,
                rewards=torch.tensor(rewards),
                max_token_num=int(ids.max()),
            ).get_key_tokens()
            present = sorted({t for r in responses for t in r})
            out.append(
                dict(
                    settings=settings,
                    rewards=rewards,
                    responses=responses,
                    scores={str(t): float(keys[t]) for t in present},
                )
            )
    # One case a line, so a change shows as a diff of the cases it touches.
    sys.stdout.write('{"reference": "xiaolizh1/KTAE", "end_id": %d, "cases": [\n' % END)
    sys.stdout.write(",\n".join(json.dumps(c) for c in out))
    sys.stdout.write("\n]}\n")


if __name__ == "__main__":
    main()
