"""transformers' side of the real-model tests (real_model.rs), on a model folder.

  python real_model_reference.py logits DIR IDS_JSON OUT   -> OUT: the logits of the rows
        of token ids, f32 little-endian, [rows, tokens, vocab] in order
  python real_model_reference.py greedy DIR USERS_JSON N   -> one JSON line: each user
        message's prompt ids (apply_chat_template), its N greedy tokens, and at each step
        the gap between the two largest logits
  python real_model_reference.py chat DIR TURNS_JSON       -> one JSON line: the ids of
        apply_chat_template(messages, add_generation_prompt=True) for each [system, user]
        pair (system null: no system turn)
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.set_num_threads(2)


def model(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def chat_ids(tok, system, user):
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": user}
    ]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    # transformers 5 returns a BatchEncoding for a single conversation.
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def logits(folder, ids_json, out):
    ids = torch.tensor(json.loads(ids_json))
    with torch.no_grad():
        z = model(folder)(ids).logits.float()
    z.contiguous().numpy().astype("<f4").tofile(out)


def greedy(folder, users_json, n):
    m, tok = model(folder), AutoTokenizer.from_pretrained(folder)
    rows = []
    for user in json.loads(users_json):
        prompt = chat_ids(tok, None, user)
        ids = torch.tensor([prompt])
        tokens, gaps = [], []
        with torch.no_grad():
            for _ in range(int(n)):
                z = m(ids).logits[0, -1].float()
                top = torch.topk(z, 2).values
                t = int(torch.argmax(z))
                tokens.append(t)
                gaps.append(float(top[0] - top[1]))
                ids = torch.cat([ids, torch.tensor([[t]])], dim=1)
        rows.append({"prompt": prompt, "tokens": tokens, "gaps": gaps})
    print(json.dumps(rows))


def chat(folder, turns_json):
    tok = AutoTokenizer.from_pretrained(folder)
    print(json.dumps([chat_ids(tok, s, u) for s, u in json.loads(turns_json)]))


if __name__ == "__main__":
    {"logits": logits, "greedy": greedy, "chat": chat}[sys.argv[1]](*sys.argv[2:])
