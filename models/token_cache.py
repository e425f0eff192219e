"""A tokenizer that remembers the rows it made: the benchmarks' texts are the same at every
evaluation of a run, so a trainer that scores them every epoch tokenizes each text once.

    tokenize = CachedTokenizer(loaded.tokenizer)
    tokenize(["a dog", "a cat"])   # [2, context_length], as loaded.tokenizer returns it

Rows are kept without their padding (int32) up to `max_texts` texts; texts beyond that are
tokenized every time. Any output other than one 2-D row per text is passed through uncached.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch


class CachedTokenizer:
    def __init__(self, tokenizer: Callable[[list[str]], torch.Tensor], max_texts: int = 500_000):
        self.tokenizer, self.max_texts = tokenizer, max_texts
        self.rows: dict[str, torch.Tensor] = {}
        self.width, self.dtype = None, None  # of the tokenizer's output

    def __getattr__(self, name: str):  # context_length, vocab_size, ... of the wrapped tokenizer
        if name == "tokenizer":
            raise AttributeError(name)
        return getattr(self.tokenizer, name)

    def __call__(self, texts: str | Sequence[str], *args, **kwargs) -> torch.Tensor:
        if isinstance(texts, str) or args or kwargs:
            return self.tokenizer(texts, *args, **kwargs)
        texts = list(texts)
        if not texts:
            return self.tokenizer(texts)
        new = list(dict.fromkeys(t for t in texts if t not in self.rows))
        if new:
            made = self.tokenizer(new)
            if not (isinstance(made, torch.Tensor) and made.dim() == 2 and len(made) == len(new)):
                return made if len(new) == len(texts) else self.tokenizer(texts)
            self.width, self.dtype = made.shape[1], made.dtype
            if len(self.rows) + len(new) > self.max_texts:  # full: this call's rows from `made`
                return self._assemble(texts, dict(zip(new, self._strip(made))))
            self.rows.update(zip(new, self._strip(made)))
        return self._assemble(texts, self.rows)

    @staticmethod
    def _strip(made: torch.Tensor) -> list[torch.Tensor]:
        lengths = ((made != 0) * torch.arange(1, made.shape[1] + 1)).amax(dim=1)
        return [row[:n].to(torch.int32).clone() for row, n in zip(made, lengths.tolist())]

    def _assemble(self, texts: list[str], fresh: dict[str, torch.Tensor]) -> torch.Tensor:
        out = torch.zeros(len(texts), self.width, dtype=self.dtype)
        for i, text in enumerate(texts):
            row = fresh.get(text)
            if row is None:
                row = self.rows[text]
            out[i, :len(row)] = row
        return out
