"""The suite's tiny random Llama: demo/tinymodel.py (importable without the tests)."""

from __future__ import annotations

from demo.tinymodel import CORPUS, make_tiny_llama, train_tokenizer

__all__ = ["CORPUS", "make_tiny_llama", "train_tokenizer"]
