"""Determinism and batch invariance of greedy decoding on a GPU, as a baseline sees it.

A serving worker's determinism baseline (loader/baseline.py) hashes each probe's token ids
(``sha256`` over the RFC 8785 JSON array) and a replay compares those hashes between runs
and configurations. This probe asks the GPU question behind that design, with transformers
(vLLM's CUDA wheels are far larger than what travels to the lent GPU machine):

1. run to run: the same prompts, the same batch, twice: do the hashes match?
2. batch invariance: each prompt alone (batch 1) against all prompts in one padded batch:
   how many prompts' hashes differ, and at which token the first difference is;
3. for float32 and bfloat16, with a random Llama large enough for real GEMM tilings.

Usage (on a CUDA machine; no downloads, the model is random and the tokenizer trained here):
    python benchmarks/gpu_determinism_probe.py --out result.json
Recorded in docs/loader.md#determinism-on-a-gpu.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DEVICE = "cuda"

PROMPTS = [
    "the quick brown fox",
    "a model release is a software release",
    "every input that can change model behaviour",
    "serving workers pull verify and boot",
    "deterministic replay compares output hashes",
    "hello world, how are you today?",
    "0 1 2 3 4 5 6 7",
    "the lazy dog jumps over",
    "pinned in one bundle with one digest",
    "attested bundles only",
    "a bigger artifact",
    "output hashes between configurations",
    "I am fine, thank you.",
    "10 11 12 13 14 15",
    "verify and boot only",
    "the quick brown fox jumps over the lazy dog",
]


def token_hash(ids: list[int]) -> str:
    """As loader.baseline.token_hash: RFC 8785 of a list of ints is json with no spaces."""
    return "sha256:" + hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def build(dtype_name: str, tokenizer: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        head_dim=128,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    return model.to(dtype=getattr(torch, dtype_name), device=DEVICE).eval()


def generate(model: Any, tokenizer: Any, prompts: list[str], max_new: int) -> list[list[int]]:
    import torch

    batch = tokenizer(prompts, return_tensors="pt", padding=True).to(DEVICE)
    with torch.inference_mode():
        out = model.generate(
            **batch,
            max_new_tokens=max_new,
            min_new_tokens=max_new,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    width = batch["input_ids"].shape[1]
    return [row[width:].tolist() for row in out]


def probe(dtype_name: str, tokenizer: Any, max_new: int) -> dict[str, Any]:
    model = build(dtype_name, tokenizer)
    t0 = time.perf_counter()
    batched = generate(model, tokenizer, PROMPTS, max_new)
    batched_again = generate(model, tokenizer, PROMPTS, max_new)
    alone = [generate(model, tokenizer, [p], max_new)[0] for p in PROMPTS]
    seconds = time.perf_counter() - t0
    run_to_run = [first_difference(a, b) for a, b in zip(batched, batched_again, strict=True)]
    batch_var = [first_difference(a, b) for a, b in zip(alone, batched, strict=True)]
    return {
        "dtype": dtype_name,
        "prompts": len(PROMPTS),
        "new_tokens": max_new,
        "seconds": round(seconds, 2),
        "run_to_run_mismatches": sum(d is not None for d in run_to_run),
        "batch1_vs_batch16_mismatches": sum(d is not None for d in batch_var),
        "first_divergence_tokens": sorted(d for d in batch_var if d is not None),
        "batch16_hashes": [token_hash(ids) for ids in batched],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of this script")
    args = parser.parse_args()
    import torch

    global DEVICE  # noqa: PLW0603
    DEVICE = args.device

    from tests.tinymodel import train_tokenizer

    tokenizer = train_tokenizer()
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "runs": [probe(d, tokenizer, args.new_tokens) for d in ("float32", "bfloat16")],
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for run in result["runs"]:
        print({k: v for k, v in run.items() if k != "batch16_hashes"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
