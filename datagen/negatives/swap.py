"""Swap negatives of the compclip rules: the same words in a new order (six sub-kinds named after
NegCLIP's swap types, SugarCrepe's obj / att). NegCLIP's own procedure is the negclip rule set
(`negclip.py`); these are guarded variants of it.

Every function takes a parsed caption and an rng and returns up to `limit` distinct negatives:
all swappable pairs are listed, shuffled by the rng, and rendered until `limit` new captions are
found (a candidate equal to the caption after `normalise` is dropped).

| sub-kind      | swaps                                                                        |
|---------------|------------------------------------------------------------------------------|
| `noun_chunk`  | two noun chunks longer than two words                                        |
| `verb_phrase` | two `VERB? ADV* AUX* VERB+` phrases of one tag followed by the same kind of word |
| `noun`        | the whole nouns (compound included) of two chunks with NN heads               |
| `noun_plural` | the same with NNS heads                                                      |
| `adverb`      | two adverbs                                                                  |
| `adjective`   | two adjectives of one attribute group before the nouns of two chunks         |
| `obj`         | two whole noun chunks of the same number ("a man ... a woman" -> "a woman ... a man") |
| `att`         | two adjectives of one attribute group in two chunks with different heads ("blue bathroom, white towels") |

`guards.swap_allowed` says which noun swaps describe a scene that can exist: never a person or
animal with a thing, never a thing or animal as the agent of a person's verb ("A helmet is
wearing a dog"), never a possessive pronoun's chunk; strictly, two animates not around a
symmetric relation, two things around a spatial relation with two sides ... `obj` and `att`
(SugarCrepe's types) take only such pairs. The sub-kinds named after NegCLIP's types
(`noun_chunk`, `noun`, `noun_plural`, `verb_phrase`, `adjective`) take the strictly allowed
pairs when a caption has any, else the allowed ones, else every pair: a less plausible pair is
dropped whenever a more plausible one exists, and a caption with no plausible pair still gets
a swap. Among the kept pairs, two of one kind of thing come first (`same_category`).
"""
from __future__ import annotations

import random
from itertools import combinations
from typing import Callable, Iterable, Optional

from compclip.datagen.negatives.base import normalise, register_negative
from compclip.datagen.negatives.text import View, render, swap_spans, view
from compclip.datagen.negatives.guards import kind_of, same_category, swap_allowed
from compclip.datagen.negatives.vocab import ADJ_STOP, ATTRIBUTE_OF, POSITION_NOUNS, is_part_noun
from compclip.shardset.schema import Negative

Span = tuple[int, int]
# the sub-kinds named after NegCLIP's swap types: the plausibility filter never leaves them
# empty (sample mode keeps the most likely candidate even below its margin)
NEGCLIP_TYPES = ("noun_chunk", "verb_phrase", "noun", "noun_plural", "adverb", "adjective")


def pick(v: View, rng: random.Random, candidates: list, build: Callable[[object], Optional[str]],
         kind: str, subkind: str, limit: int,
         first: Optional[Callable[[object], bool]] = None) -> list[Negative]:
    """Shuffle `candidates` (those passing `first` ahead, in shuffled order), render each with
    `build`, keep up to `limit` distinct new captions."""
    if not candidates:
        return []
    rng.shuffle(candidates)
    if first is not None:
        candidates.sort(key=lambda c: not first(c))
    seen = {v.norm}
    out = []
    for cand in candidates:
        text = build(cand)
        if text is None:
            continue
        key = normalise(text)
        if key and key not in seen:
            seen.add(key)
            out.append(Negative(text, kind, subkind, "rules"))
            if len(out) >= limit:
                break
    return out


def _swap_pairs(v: View, spans: Iterable[Span], rng: random.Random, subkind: str, limit: int,
                kind: str = "swap", apart: bool = False, prefer_same: bool = False,
                guard: Optional[Callable[[Span, Span, bool], bool]] = None) -> list[Negative]:
    """Every pair of `spans` with different words; with `apart`, only single tokens of two
    different noun chunks (or outside chunks), so "black and brown dog" or "pickup truck" is
    never turned around inside one phrase. With `guard` (`guard(a, b, strict)`), only the
    strictly allowed pairs are kept when there are any, else the allowed ones, else all."""
    spans = list(spans)
    texts = [" ".join(v.lower[s:e]) for s, e in spans]
    pairs = [(a, b) for (i, a), (j, b) in combinations(enumerate(spans), 2) if texts[i] != texts[j]
             and not (apart and v.chunk_at[a[0]] >= 0 and v.chunk_at[a[0]] == v.chunk_at[b[0]])
             and not same_list(v, a, b)]
    if guard is not None:
        allowed = [ab for ab in pairs if guard(*ab, False)]
        pairs = [ab for ab in allowed if guard(*ab, True)] or allowed or pairs
    return pick(v, rng, pairs, lambda ab: render(swap_spans(v, *ab), v.cap), kind, subkind, limit,
                first=(lambda ab: same_category(v, *ab)) if prefer_same else None)


def _chunk_guard(v: View) -> Callable[[Span, Span, bool], bool]:
    """`guards.swap_allowed` for two spans that are chunks or chunk heads."""
    return lambda a, b, strict: swap_allowed(v, v.chunks[v.chunk_at[a[0]]],
                                             v.chunks[v.chunk_at[b[0]]], strict)


def whole_words(v: View, start: int, end: int) -> bool:
    """The span does not cut a hyphenated word ("wet-suited", "cross-country") at either end:
    no hyphen joins its first token to the one before it, nor its last to the one after."""
    h, w = v.hyphenated, v.words
    cut_left = start > 0 and start in h and start - 1 in h and "-" in (w[start - 1], w[start])
    cut_right = end < len(v) and end - 1 in h and end in h and "-" in (w[end - 1], w[end])
    return not cut_left and not cut_right


def same_list(v: View, a: Span, b: Span) -> bool:
    """`a` and `b` are items of one list ("broccoli, carrots and meat"): only commas, "and" /
    "or" and other noun chunks stand between them, so swapping them keeps the meaning."""
    (_, a1), (b0, _) = sorted([a, b])
    between = range(a1, b0)
    if not between:
        return False
    joined = False
    for i in between:
        if v.tags[i] in (",", "CC"):
            joined = True
        elif v.chunk_at[i] < 0:
            return False
    return joined


def _tokens(v: View, keep: Callable[[int], bool]) -> list[Span]:
    """Single tokens to swap; never half of a hyphenated word ("snow-packed")."""
    return [(i, i + 1) for i in range(len(v)) if keep(i) and i not in v.hyphenated]


def _object_noun(v: View, i: int) -> bool:
    """A noun that names a thing: not positional / partitive / framing ("front", "piece",
    "picture"), not followed by "of" ("a bowl of"), not a possessor ("person's")."""
    nxt = v.lower[i + 1] if i + 1 < len(v) else ""
    return (v.lower[i].isalpha() and v.lower[i] not in POSITION_NOUNS
            and nxt not in ("of", "'s", "'"))


def _nouns(v: View, tag: str) -> list[Span]:
    """The whole noun of each chunk whose head has `tag` (NN / NNS): the head with its
    compound ("cell phone", "fence post"), so a swap never cuts a compound ("cell wall");
    also when the tagger split one ("teddy" NN + "bear" VBP), that chunk is left out."""
    out = []
    for c in v.chunks:
        h = c.head
        if (v.tags[h] == tag and _object_noun(v, h) and whole_words(v, c.noun_start, c.end)
                and not (tag == "NN" and c.end < len(v) and v.tags[c.end] in ("NN", "NNS", "VB", "VBP"))):
            out.append((c.noun_start, c.end))
    return out


@register_negative("swap", "noun_chunk")
def swap_noun_chunk(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v = view(doc)
    return _swap_pairs(v, [(c.start, c.end) for c in v.chunks if c.end - c.start > 2
                           and not is_part_noun(v, c) and whole_words(v, c.start, c.end)],
                       rng, "noun_chunk", limit, prefer_same=True, guard=_chunk_guard(v))


@register_negative("swap", "verb_phrase")
def swap_verb_phrase(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    """Two verb phrases whose last verbs have one tag and are followed by the same word (a
    preposition, an adverb) or by nothing: "A cat sleeps quietly while a dog barks loudly",
    not "A man watches a bat while a woman holds" nor, with their objects left in place,
    "wearing two cellphones while holding headphones"."""
    v = view(doc)
    spans = [(s, e) for s, e in v.verb_phrases if s not in v.hyphenated and e - 1 not in v.hyphenated]
    return _swap_pairs(v, spans, rng, "verb_phrase", limit,
                       guard=lambda a, b, strict: _frame(v, a) == _frame(v, b)
                       and _frame(v, a)[1] not in ("object", "other"))


def _frame(v: View, span: Span) -> tuple[str, str]:
    """(tag of the phrase's last verb, what follows it: an object, a preposition, an adverb, the
    end, or something else)."""
    e = span[1]
    if e >= len(v) or v.pos[e] == "PUNCT" or v.tags[e] == "CC":
        follows = "end"
    elif v.chunk_at[e] >= 0 and v.chunks[v.chunk_at[e]].start == e:
        follows = "object"
    else:
        follows = (v.lower[e] if v.tags[e] in ("IN", "RP", "TO")
                   else "adverb" if v.pos[e] == "ADV" else "other")
    return v.tags[e - 1], follows


@register_negative("swap", "noun")
def swap_noun(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v = view(doc)
    return _swap_pairs(v, _nouns(v, "NN"), rng,
                       "noun", limit, apart=True, prefer_same=True, guard=_chunk_guard(v))


@register_negative("swap", "noun_plural")
def swap_noun_plural(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v = view(doc)
    return _swap_pairs(v, _nouns(v, "NNS"), rng,
                       "noun_plural", limit, apart=True, prefer_same=True, guard=_chunk_guard(v))


@register_negative("swap", "adverb")
def swap_adverb(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v = view(doc)
    return _swap_pairs(v, _tokens(v, lambda i: v.pos[i] == "ADV"), rng, "adverb", limit)


@register_negative("swap", "adjective")
def swap_adjective(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    """Two adjectives of one attribute group (colour, size ...) before the nouns of two
    different chunks: "a snowy coat ... a blue field" or "a male girl" would say nothing a
    photo could show."""
    v = view(doc)
    attributive = {a for c in v.chunks for a in c.adjectives}
    return _swap_pairs(v, _tokens(v, lambda i: v.pos[i] == "ADJ" and v.lower[i] not in ADJ_STOP
                                  and i in attributive and v.lower[i] in ATTRIBUTE_OF),
                       rng, "adjective", limit, apart=True, guard=lambda a, b, strict: (
                           ATTRIBUTE_OF[v.lower[a[0]]] == ATTRIBUTE_OF[v.lower[b[0]]]))


def _number(v: View, head: int) -> str:
    return "plural" if v.tags[head] in ("NNS", "NNPS") else "singular"


@register_negative("swap", "obj")
def swap_obj(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    """Two whole noun chunks with different heads and the same number, so verbs still agree."""
    v = view(doc)
    chunks = [c for c in v.chunks if not is_part_noun(v, c) and whole_words(v, c.start, c.end)]
    pairs = [((a.start, a.end), (b.start, b.end)) for a, b in combinations(chunks, 2)
             if v.lower[a.head] != v.lower[b.head] and _number(v, a.head) == _number(v, b.head)
             and v.lower[a.head].isalpha() and v.lower[b.head].isalpha()
             and not same_list(v, (a.start, a.end), (b.start, b.end)) and swap_allowed(v, a, b)]
    return pick(v, rng, pairs, lambda ab: render(swap_spans(v, *ab), v.cap), "swap", "obj", limit,
                first=lambda ab: same_category(v, *ab))


@register_negative("swap", "att")
def swap_att(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    """Two adjectives of one attribute group (colour, size, material ...) describing two chunks
    whose heads differ: "a blue racket and a yellow ball" -> "a yellow racket and a blue ball".
    Items of one list count too ("a red shirt and blue jeans": their attributes are not
    interchangeable); an adjective of another group, or of none, would make "a red man in a
    young shirt"."""
    v = view(doc)
    adjs = [(a, v.lower[c.head], ATTRIBUTE_OF[v.lower[a]]) for c in v.chunks for a in c.adjectives
            if v.lower[a] in ATTRIBUTE_OF and v.lower[a] not in ADJ_STOP and a not in v.hyphenated]
    pairs = [((a, a + 1), (b, b + 1)) for (a, ha, ga), (b, hb, gb) in combinations(adjs, 2)
             if ha != hb and ga == gb and v.lower[a] != v.lower[b] and v.chunk_at[a] != v.chunk_at[b]]
    return pick(v, rng, pairs, lambda ab: render(swap_spans(v, *ab), v.cap), "swap", "att", limit)
