"""Builds a small random Qwen3 (or Qwen2 / Qwen2.5) checkpoint with transformers and
records its logits and greedy decoding, for the parity tests in parity.rs.

  python hf_reference.py make DIR TIED KV_HEADS [qwen3|qwen2|llama3]
                                                  -> writes DIR (HF folder) and DIR/reference.json
  python hf_reference.py logits DIR IDS_JSON      -> prints transformers' logits for a folder
"""
import json
import sys

import torch
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ."


def tokenizer_json():
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for i, c in enumerate(CHARS):
        vocab[c] = i + 3
    special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [special(0, "<pad>"), special(1, "<eos>"), special(2, "<unk>")],
            "normalizer": None, "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "Fuse"},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": []}}


IDS = [[5, 17, 33, 2, 9, 41, 60, 12, 7, 3, 28, 50, 11, 4, 39, 22, 8, 61, 30, 14],
       [40, 6, 19, 55, 27, 3, 45, 10, 33, 52, 1, 24, 18, 37, 9, 62, 21, 13, 48, 16]]


def make(out, tied, kv, family="qwen3"):
    torch.manual_seed(1234 + tied * 10 + kv)
    common = dict(vocab_size=len(CHARS) + 3, hidden_size=64, intermediate_size=96,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=kv,
                  max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=bool(tied), eos_token_id=1, bos_token_id=1,
                  pad_token_id=0, torch_dtype="float32")
    if family == "qwen2":
        # Qwen2 / Qwen2.5: q/k/v biases (initialised below like weights), no q/k norm.
        model = Qwen2ForCausalLM(Qwen2Config(**common)).eval()
    elif family == "llama3":
        # Llama 3's rotary scaling, with an original context of 64 of the 128 positions so
        # that all three frequency bands (kept, blended, divided) occur at head_dim 16.
        common.pop("rope_theta")
        rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}
        model = LlamaForCausalLM(LlamaConfig(head_dim=16, rope_parameters=rope, **common)).eval()
    else:
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **common)).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)  # not all ones, so the norms are really tested
            else:
                p.normal_(0.0, 0.2)
    model.save_pretrained(out, safe_serialization=True)
    with open(f"{out}/tokenizer.json", "w") as f:
        json.dump(tokenizer_json(), f)
    with torch.no_grad():
        logits = model(torch.tensor(IDS)).logits
        greedy = model.generate(torch.tensor(IDS[:1]), do_sample=False, max_new_tokens=32,
                                min_new_tokens=32, eos_token_id=None, pad_token_id=0,
                                output_scores=True, return_dict_in_generate=True)
        # Each step's margin between the two largest logits: where it is within round-off,
        # another f32 evaluation may pick the other token.
        top2 = [s[0].topk(2).values for s in greedy.scores]
        gaps = [float(t[0] - t[1]) for t in top2]
    ref = {"ids": IDS, "logits": logits.flatten().tolist(), "shape": list(logits.shape),
           "greedy": greedy.sequences[0, len(IDS[0]):].tolist(), "greedy_gaps": gaps}
    with open(f"{out}/reference.json", "w") as f:
        json.dump(ref, f)


def logits(folder, ids_json):
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(torch.tensor(json.loads(ids_json))).logits
    print(json.dumps(out.flatten().tolist()))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6])
    else:
        logits(sys.argv[2], sys.argv[3])
