"""Converts a GGUF file to a Hugging Face model folder with transformers' own GGUF loader.

Usage: python gguf_to_hf.py FILE.gguf OUT_DIR DTYPE   (DTYPE: f32 | bf16)

transformers dequantizes the GGUF's tensors while loading (its GGUF quantizer) and builds the
tokenizer from the GGUF's metadata. Saving refuses while that quantizer is attached, so it
is detached first: the weights in memory are already plain tensors of DTYPE.
Prints one JSON line: the architecture, the parameter count and the converter's versions.
"""

import json
import os
import sys

import importlib.metadata

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    path, out, dtype_name = sys.argv[1], sys.argv[2], sys.argv[3]
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    folder, name = os.path.split(os.path.abspath(path))
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(
        json.dumps(
            {
                "architecture": type(model).__name__,
                "parameters": sum(p.numel() for p in model.parameters()),
                "versions": {
                    "transformers": transformers.__version__,
                    "torch": torch.__version__,
                    "gguf": importlib.metadata.version("gguf"),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
