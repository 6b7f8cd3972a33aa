"""Make a tiny random Llama with a tokenizer trained on the fly (no downloads).

The demo, the tests and the benchmarks share it: ``make_tiny_llama(out_dir)`` writes a
directory that transformers and vLLM (CPU) can load from disk: config.json,
generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
special_tokens_map.json. hidden 128, 2 attention heads (head_dim 64: vLLM's CPU attention
needs it), 2 layers. From the command line: ``python -m demo.make_model OUT_DIR``
(demo/make_model.py). Needs torch, transformers and tokenizers (the ``test`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["CORPUS", "make_tiny_llama", "train_tokenizer"]

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a model release is a software release with a bigger artifact",
    "every input that can change model behaviour is pinned in one bundle",
    "serving workers pull verify and boot only attested bundles",
    "deterministic replay compares output hashes between configurations",
    "hello world, how are you today? I am fine, thank you.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
] * 20


def train_tokenizer(vocab_size: int = 512) -> Any:  # a transformers PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))  # noqa: S106 - a token, not a secret
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    # the special tokens are words, not secrets
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        unk_token="<unk>",  # noqa: S106
        bos_token="<s>",  # noqa: S106
        eos_token="</s>",  # noqa: S106
    )


def make_tiny_llama(out_dir: Path, *, seed: int = 0, dtype: str = "float32") -> Path:
    """Write a tiny random Llama and its tokenizer to ``out_dir``; return ``out_dir``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))  # type: ignore[no-untyped-call]
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    for path in out_dir.rglob("*"):
        if path.is_file():
            path.chmod(0o644)
    return out_dir
