"""Rule set `negclip`: NegCLIP's swap negatives, made as its authors' script made them.

NegCLIP (Yuksekgonul et al., ICLR 2023) made its hard negatives with one script: a caption is
parsed by a full spaCy pipeline and six swaps are tried, one random pair each:

| sub-kind      | candidates                                                | swapped by |
|---------------|-----------------------------------------------------------|------------|
| `noun_chunk`  | `doc.noun_chunks` of more than two space-separated words   | string replacement, lower-cased |
| `verb_phrase` | `VERB? ADV* AUX* VERB+` (spaCy `Matcher` on POS), overlaps removed by `filter_spans` | string replacement, lower-cased |
| `noun`        | tokens tagged NN                                          | two tokens exchanged, tokens joined by spaces |
| `noun_plural` | tokens tagged NNS                                         | the same |
| `adverb`      | tokens of POS ADV                                         | the same |
| `adjective`   | tokens of POS ADJ                                         | the same |

String replacement of phrases A and B: every occurrence of A in the caption becomes a
placeholder, every occurrence of B becomes A, then the placeholder becomes B. A result equal to
the caption once "." and "," are removed and spaces collapsed (case kept) is dropped.

`limit=1` (sample mode) is the script: one random pair of candidates per sub-kind, and nothing
when that pair gives the caption back. A larger `limit` (all mode) tries every ordered pair and
keeps the distinct results in pair order; when there are more than `limit`, a seeded random
`limit` of them.

Nothing else is applied: no guards, no lexicon, no plausibility filter, no a/an repair, and no
caption is skipped except an empty one. Faithful output includes the script's bad negatives ("A
doughnut taking a bite of a man") and its near-copies (two equal nouns exchanged in a caption
with "'s" re-joins the tokens as "man 's"). The spaCy model is a choice (`--spacy-model`; the
authors loaded `en_core_web_lg`, which PyPI does not carry here); it is recorded in the manifest.
`tests/test_negclip_parity.py` holds an independent transcription of the script and checks
that this module makes exactly its negatives.
"""
from __future__ import annotations

import random
from itertools import permutations
from typing import Callable, Optional, Sequence

from compclip.datagen.negatives.base import register_negative
from compclip.shardset.schema import Negative

PLACEHOLDER = "123X456"  # the script's
VERB_PHRASE = [{"POS": "VERB", "OP": "?"}, {"POS": "ADV", "OP": "*"},
               {"POS": "AUX", "OP": "*"}, {"POS": "VERB", "OP": "+"}]
_NLP_CACHE: dict[str, object] = {}


def load_nlp(model: str):
    """The spaCy pipeline the script's parse needs (cached per process): tokenizer, tok2vec,
    tagger, parser (noun chunks) and attribute_ruler (POS); ner and the lemmatizer, which no
    swap reads, are left out."""
    if model not in _NLP_CACHE:
        from compclip.compat.spacy import import_spacy
        _NLP_CACHE[model] = import_spacy().load(model, exclude=["ner", "lemmatizer"])
    return _NLP_CACHE[model]


def same_caption(new: str, caption: str) -> bool:
    """The script's test: equal once "." and "," are removed and spaces collapsed (case kept)."""
    def bare(text: str) -> str:
        return " ".join(text.replace(".", "").replace(",", "").split())
    return bare(new) == bare(caption)


def swap_phrases(caption: str, a: str, b: str) -> Optional[str]:
    new = caption.replace(a, PLACEHOLDER).replace(b, a).replace(PLACEHOLDER, b)
    return None if same_caption(new, caption) else new.lower()


def swap_tokens(caption: str, words: Sequence[str], i: int, j: int) -> Optional[str]:
    new = list(words)
    new[i], new[j] = new[j], new[i]
    new_text = " ".join(new)
    return None if same_caption(new_text, caption) else new_text


def _negatives(candidates: list, make: Callable[[object, object], Optional[str]], rng: random.Random,
               subkind: str, limit: int) -> list[Negative]:
    """One random pair (`limit` 1), else the distinct results of every ordered pair (at most `limit`)."""
    if len(candidates) < 2:
        return []
    if limit == 1:
        texts = [make(*rng.sample(candidates, 2))]
    else:
        texts = list(dict.fromkeys(make(a, b) for a, b in permutations(candidates, 2)))
    texts = [t for t in texts if t is not None]
    if len(texts) > limit:
        texts = rng.sample(texts, limit)
    return [Negative(t, "swap", subkind, "rules") for t in texts]


def _phrases(doc, spans, rng: random.Random, subkind: str, limit: int) -> list[Negative]:
    return _negatives([s.text for s in spans], lambda a, b: swap_phrases(doc.text, a, b), rng, subkind, limit)


def _tokens(doc, keep: Callable[[object], bool], rng: random.Random, subkind: str, limit: int) -> list[Negative]:
    words = [t.text for t in doc]
    return _negatives([t.i for t in doc if keep(t)], lambda i, j: swap_tokens(doc.text, words, i, j),
                      rng, subkind, limit)


def verb_phrases(doc) -> list:
    from spacy.matcher import Matcher
    from spacy.util import filter_spans
    matcher = Matcher(doc.vocab)
    matcher.add("Verb phrase", [VERB_PHRASE])
    return filter_spans([doc[start:end] for _, start, end in matcher(doc)])


@register_negative("swap", "noun_chunk", rules="negclip")
def swap_noun_chunk(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    return _phrases(doc, [c for c in doc.noun_chunks if len(c.text.split()) > 2], rng, "noun_chunk", limit)


@register_negative("swap", "verb_phrase", rules="negclip")
def swap_verb_phrase(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    return _phrases(doc, verb_phrases(doc), rng, "verb_phrase", limit)


@register_negative("swap", "noun", rules="negclip")
def swap_noun(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    return _tokens(doc, lambda t: t.tag_ == "NN", rng, "noun", limit)


@register_negative("swap", "noun_plural", rules="negclip")
def swap_noun_plural(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    return _tokens(doc, lambda t: t.tag_ == "NNS", rng, "noun_plural", limit)


@register_negative("swap", "adverb", rules="negclip")
def swap_adverb(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    return _tokens(doc, lambda t: t.pos_ == "ADV", rng, "adverb", limit)


@register_negative("swap", "adjective", rules="negclip")
def swap_adjective(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    return _tokens(doc, lambda t: t.pos_ == "ADJ", rng, "adjective", limit)
