"""A `kind` / `subkind` label for a (caption, negative caption) pair that came without one.

TROHN-Text and TROHN-Img publish only `caption` and `negative_caption` (the per-type files of
their generation script are not released), but every `neg.json` entry needs a schema label and
recipes filter negatives by kind. `PairLabeller` infers one from how the two captions differ,
over the same spaCy tagging the rule generator uses (`datagen.negatives.rules.load_nlp`, POS
from `datagen.negatives.text.view`); punctuation and case are ignored:

| the negative ...                                        | kind    | subkind                          |
|---------------------------------------------------------|---------|----------------------------------|
| has the same words, reordered                           | swap    | att if every moved word is an adjective, else obj |
| keeps every caption word and adds some                  | add     | obj if an added word is a noun, else att |
| anything else                                           | replace | first changed caption word: noun/pronoun/number -> obj, adjective -> att, else (verb, preposition, ...) -> rel |

It is a heuristic (an LLM rewrite that changes several things gets the label of its first
change); the shard records that a label was inferred (`meta["negative_labels"] = "inferred"`).
"""
from __future__ import annotations

import difflib
from collections import Counter
from typing import Sequence

NOUNISH = ("NOUN", "PROPN", "PRON", "NUM")


def _words(v) -> list[tuple[str, str]]:
    return [(w, p) for w, p in zip(v.lower, v.pos) if p not in ("PUNCT", "SPACE") and w.strip()]


def label_views(caption_view, negative_view) -> tuple[str, str]:
    """(kind, subkind) for two token views (`datagen.negatives.text.View`)."""
    cw, nw = _words(caption_view), _words(negative_view)
    c_count, n_count = Counter(w for w, _ in cw), Counter(w for w, _ in nw)
    ops = [op for op in difflib.SequenceMatcher(a=[w for w, _ in cw], b=[w for w, _ in nw],
                                                autojunk=False).get_opcodes() if op[0] != "equal"]
    if c_count == n_count:
        moved = [cw[i][1] for _, i1, i2, _, _ in ops for i in range(i1, i2)]
        return "swap", "att" if moved and all(p == "ADJ" for p in moved) else "obj"
    if not (c_count - n_count):
        added = [nw[j][1] for _, _, _, j1, j2 in ops for j in range(j1, j2)]
        return "add", "obj" if any(p in NOUNISH for p in added) else "att"
    removed = [cw[i][1] for _, i1, i2, _, _ in ops for i in range(i1, i2)]
    first = removed[0] if removed else None
    return "replace", "obj" if first in NOUNISH else "att" if first == "ADJ" else "rel"


class PairLabeller:
    """Labels pairs in batches: `labeller(pairs) -> [(kind, subkind), ...]` (spaCy loads once)."""

    def __init__(self, batch_size: int = 256):
        self.batch_size = batch_size
        self._nlp = None

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        if not pairs:
            return []
        from compclip.datagen.negatives.rules import load_nlp
        from compclip.datagen.negatives.text import view
        if self._nlp is None:
            self._nlp = load_nlp()
        texts = [t.strip() for pair in pairs for t in pair]
        docs = list(self._nlp.pipe(texts, batch_size=self.batch_size))
        return [label_views(view(docs[2 * i]), view(docs[2 * i + 1])) for i in range(len(pairs))]
