"""Which things and actions come together in one caption: a scene model for replaced and added objects.

A replacing or added object has to fit the rest of the scene, not only its own slot: "A large
zebra standing next to a toilet", "Four men ride bears", "a cat in a bathroom laying on a bed"
passed every slot rule (a noun seen after "next to", an animal for an animal) and were judged
implausible. `SceneModel` counts, over the corpus's captions, how often each item (a chunk's
head noun by crude lemma, a verb as `v:<word>`: `vocab.scene_items`) occurs in a caption and how
often two items occur in one caption. The association of two items is

    log((k + ALPHA) / (E + ALPHA)),   E = n(a) * n(b) / N

(k: captions with both, n: captions with each, N: captions): about 0 when the counts are too
small to say anything, below 0 when the pair is rarer than chance ("zebra" and "toilet"), above
0 when it is more common. `fit(word, context)` is the mean association of a word with the
caption's other items; rules draw a replacement or an added object only with `fit >= FIT_MIN`.
Trained by `Vocabulary.mine` on the same captions as the vocabulary and stored with it.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable

ALPHA = 0.5  # add-ALPHA smoothing of observed and expected pair counts
FIT_MIN = 0.0  # a drawn object's mean association with the caption's other items, at least


class SceneModel:
    """Caption counts of items and of pairs of items; `fit` scores a word against a caption's."""

    def __init__(self, n_captions: int, counts: dict[str, int], pairs: dict[tuple[str, str], int]):
        self.n = n_captions
        self.counts = counts  # item -> captions with it
        self.pairs = pairs  # (a, b), a < b -> captions with both

    @classmethod
    def train(cls, item_sets: Iterable[Iterable[str]]) -> "SceneModel":
        counts: Counter = Counter()
        pairs: Counter = Counter()
        n = 0
        for items in item_sets:
            items = sorted(set(items))
            n += 1
            counts.update(items)
            for i, a in enumerate(items):
                for b in items[i + 1:]:
                    pairs[a, b] += 1
        return cls(n, dict(counts), dict(pairs))

    def fit(self, word: str, context: Iterable[str]) -> float:
        """Mean association of `word` with the `context` items (0.0 for no context); with one
        item, the association of the two."""
        share = self.counts.get(word, 0) / self.n if self.n else 0.0
        pairs, counts, total, k = self.pairs, self.counts, 0.0, 0
        for c in context:  # asked ~30 times a caption: no helper call per pair
            if c != word:
                both = pairs.get((word, c) if word < c else (c, word), 0)
                total += math.log((both + ALPHA) / (share * counts.get(c, 0) + ALPHA))
                k += 1
        return total / k if k else 0.0

    def fits(self, word: str, context: Iterable[str]) -> bool:
        return self.fit(word, context) >= FIT_MIN

    def to_json_dict(self) -> dict[str, Any]:
        return {"n": self.n, "counts": self.counts,
                "pairs": {f"{a} {b}": k for (a, b), k in self.pairs.items()}}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> "SceneModel":
        pairs = {}
        for key, k in data["pairs"].items():
            a, b = key.split(" ")
            pairs[a, b] = int(k)
        return cls(int(data["n"]), {w: int(k) for w, k in data["counts"].items()}, pairs)
