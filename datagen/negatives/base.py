"""The negative-generator interface: caption in, labelled negatives out.

Each negative kind is one function `fn(doc, rng) -> list[Negative]` over a parsed caption (a spaCy
`Doc`, parsed once and shared by every function), registered under `(kind, subkind)` with
`@register_negative`, in the spirit of timm's model registry. A `NegativeGenerator` is anything
with `generate(captions, seed) -> list[list[Negative]]`: one list per caption, deterministic for
a seed, never containing the caption itself. Rule-based and LLM back ends both meet it.
"""
from __future__ import annotations

import random
import re
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from datagen.schema import SUBKINDS, Negative

NegativeFn = Callable[[Any, random.Random], list[Negative]]
NEGATIVE_FNS: dict[tuple[str, str], NegativeFn] = {}


def register_negative(kind: str, subkind: str) -> Callable[[NegativeFn], NegativeFn]:
    """Register `fn` as the generator of one (kind, subkind)."""
    if subkind not in SUBKINDS.get(kind, ()):
        raise ValueError(f"({kind}, {subkind}) is not a negative kind of the shard schema")

    def wrap(fn: NegativeFn) -> NegativeFn:
        if (kind, subkind) in NEGATIVE_FNS:
            raise ValueError(f"({kind}, {subkind}) is registered twice")
        NEGATIVE_FNS[(kind, subkind)] = fn
        return fn
    return wrap


_PUNCT = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Lower-case, punctuation removed, spaces collapsed: two captions equal under this are one."""
    return _SPACE.sub(" ", _PUNCT.sub("", text.lower())).strip()


def is_new_negative(caption: str, negative: str) -> bool:
    return normalise(negative) != normalise(caption) and bool(normalise(negative))


@runtime_checkable
class NegativeGenerator(Protocol):
    def generate(self, captions: Sequence[str], seed: int = 0) -> list[list[Negative]]:
        ...
