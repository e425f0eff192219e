"""What an adjective is to its noun: nearly always true of it, or half of one thing with it.

Both add:att and replace:att leave such adjectives alone. An adjective that is nearly always
true of a noun ("a white plate", "a red stop sign") changes nothing when added; one that makes a
unit with the next word ("teddy bear", "high chair", "polar bear") is no attribute at all, and
neither adding one inside the unit ("a teddy brown bear") nor replacing its first word ("a
brown bear" for "a polar bear", "a wooden chair" for "a high chair") gives a negative.
"""
from __future__ import annotations

import compclip.datagen.negatives.lexicon as lexicon
from compclip.datagen.negatives.text import View
from compclip.datagen.negatives.text import crude_lemma
from compclip.datagen.negatives.vocab import ATTRIBUTE_OF

# two words that make one thing ("hot dog", "teddy bear"): nothing goes between them; a single
# word is always the first half of one ("teddy", "brief")
COMPOUNDS = frozenset(lexicon.lexicon()["compounds"])
_TYPICAL = {noun: frozenset(adjs.split()) for noun, adjs in lexicon.lexicon()["typical_attributes"].items()}
# An adjective that is at least this share of a head noun's adjectives in the corpus (with at
# least _TYPICAL_MIN of them) is nearly always true of it ("a white plate" 62 %, "a red sign"
# 40 %, "a large airplane" 45 % of 3,000 SugarCrepe captions): adding it changes nothing, and
# before the head it is likely half of a unit ("hot dog" 33 %, "polar bear" 34 %).
TYPICAL_SHARE = 0.3
_TYPICAL_MIN = 5


def typical_adjectives(voc, head: str) -> frozenset:
    """The adjectives nearly always true of `head` (`TYPICAL_SHARE` of its corpus adjectives,
    singular and plural buckets together, and the lexicon's `typical_attributes`); remembered
    on the vocabulary."""
    cache = voc.__dict__.setdefault("_typical_adjectives", {})
    found = cache.get(head)
    if found is None:
        lemma = crude_lemma(head)
        counts: dict[str, int] = {}
        buckets = getattr(voc, "buckets", {})
        for name in {f"adj/{head}", f"adj/{lemma}", f"adj/{lemma}s"}:
            for w, n in buckets.get(name, ()):
                counts[w] = counts.get(w, 0) + n
        total = sum(counts.values())
        found = frozenset(w for w, n in counts.items() if total >= _TYPICAL_MIN and n >= TYPICAL_SHARE * total)
        found |= _TYPICAL.get(head, frozenset()) | _TYPICAL.get(lemma, frozenset())
        cache[head] = found
    return found


def makes_unit(v: View, i: int, typical: frozenset) -> bool:
    """Tokens `i - 1` and `i` make one thing: a listed compound ("hot dog", "teddy bear") or a
    modifier that is nearly always there with this head ("polar bear"; `typical`: the head's
    `typical_adjectives`)."""
    before = v.lower[i - 1]
    return (f"{before} {v.lower[i]}" in COMPOUNDS or before in COMPOUNDS
            or (before in typical and before not in ATTRIBUTE_OF  # "small children": no unit
                and v.pos[i - 1] in ("ADJ", "NOUN", "PROPN")))
