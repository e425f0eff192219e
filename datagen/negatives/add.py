"""Add negatives: one more object or attribute, inserted where the caption stays fluent.

- `obj`: "X" -> "X and a Y" after a noun chunk, Y a corpus noun seen in the same role (after the
  same preposition or verb); a following `is/was/has` becomes `are/were/have`, and a chunk that
  is the subject of another present-tense verb is left alone (no agreement rule for it).
- `att`: an adjective before a chunk's first modifier or noun ("a white umbrella" -> "a striped
  white umbrella"), drawn from adjectives seen with the same head noun, never one of the same
  attribute group as an adjective already there ("a red brown horse"), `a`/`an` fixed.
"""
from __future__ import annotations

import random

from datagen.negatives.base import register_negative
from datagen.negatives.replace import vocab_or_builtin
from datagen.negatives.swap import pick
from datagen.negatives.text import article_for, insert_at, render, view
from datagen.negatives.vocab import ATTRIBUTE_GROUPS, ATTRIBUTE_OF, is_part_noun, noun_roles
from datagen.schema import Negative

_PLURAL_AUX = {"is": "are", "was": "were", "has": "have", "'s": "are"}


@register_negative("add", "obj")
def add_obj(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v, voc = view(doc), vocab_or_builtin(vocab)
    chunks = [c for c in v.chunks if v.lower[c.head].isalpha() and v.tags[c.head] in ("NN", "NNS")
              and not is_part_noun(v, c)
              and (c.end == len(v) or v.tags[c.end] not in ("CC", ",", "HYPH", "POS"))]

    def build(c):
        roles = noun_roles(v, c)
        new = voc.sample(rng, [f"noun/NN/{role}" for role in roles], v.lower[c.head], avoid=v.lemmas)
        if new is None:
            return None
        pieces = insert_at(v, c.end, ["and", article_for(new), new])
        if c.end < len(v) and "_subj" in roles:
            nxt = v.lower[c.end]
            if nxt in _PLURAL_AUX:
                at = c.end + 3
                pieces[at] = (_PLURAL_AUX[nxt], pieces[at][1])
            elif v.tags[c.end] == "VBZ":
                return None
        return render(pieces, v.cap)
    return pick(v, rng, chunks * limit, build, "add", "obj", limit)


@register_negative("add", "att")
def add_att(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v, voc = view(doc), vocab_or_builtin(vocab)
    chunks = [c for c in v.chunks if v.lower[c.head].isalpha() and v.tags[c.head] in ("NN", "NNS")]

    def build(c):
        head = v.lower[c.head]
        avoid = v.lemmas
        for a in c.adjectives:
            group = ATTRIBUTE_OF.get(v.lower[a])
            if group:
                avoid = avoid | set(ATTRIBUTE_GROUPS[group].split())
        new = voc.sample(rng, [f"adj/{head}", "adj/*"], head, avoid=avoid)
        if new is None:
            return None
        at = next(i for i in range(c.start, c.end) if v.tags[i] not in ("DT", "PDT", "PRP$", "CD"))
        return render(insert_at(v, at, [new]), v.cap)
    return pick(v, rng, chunks * limit, build, "add", "att", limit)
