"""Add negatives: one more object or attribute, inserted where the caption stays fluent.

- `obj`: one of five placements (`TEMPLATES`), the candidates shuffled by the caption's rng: "X
  and a Y", "a Y and X" or "X with a Y" for the subject (a chunk that starts the caption), "...
  next to a Y" / "... near a Y" after a caption that ends on an object not already "next to"
  something and not a place, scene, weather or time of day (`settings`, `scenery` and the places
  of the lexicon: "in the air next to a man", "in the deli next to a pan"); after such a caption
  the neighbour stands by the subject, before its verb ("A man next to a dog flying a kite in
  the air"). Y is a corpus noun seen in one caption with X (`with/<X>`), else in the same role,
  by frequency, that fits the scene (`scene.SceneModel`: on average no rarer than chance with
  the caption's nouns and verbs, not "giraffes ... near a desk"); never scenery, an event or a
  place (`scenery` in the lexicon, the places of `swap_categories`: "a dog with a street"),
  never a synonym or hypernym of a noun of the caption; a mass noun comes with "some" ("next to
  some food", `mass_nouns`). With "and", a following `is/was/has` (also after "that" / "who" /
  "which") becomes `are/were/have`; a co-subject must be able to do what X does
  (`guards.verb_need`: not "A pizza and two men playing") and is a person or animal exactly when
  X is ("two zebras and a camera"); a companion ("X with a Y") of a person or animal is no
  furniture or place ("The polar bear with a chair"), of a thing no person or animal, and comes
  only where no preposition follows X ("A woman with a table in blue jacket"); nothing is added
  to a chunk the tagger misread ("A giraffe stares" as one chunk with the head "stares", "A red
  pick | up truck", "A woman | surfer riding"); a subject whose verb is another present-tense
  verb or comes later is left alone (no agreement rule for it). Positional / partitive chunks
  ("the top", "a piece of") get nothing added. "X and a Y" after any chunk (the old rule) was a
  telltale template and often no scene ("riding a man and a horse").
- `att`: an adjective inside a chunk, after its determiners, possessor ("a person's") and
  quantity words ("several", "different"), in English adjective order by attribute group (size
  before age before colour before material: "a large white bowl", not "a white large bowl"),
  drawn from adjectives seen with the same head noun (never one an image cannot refute:
  `opinion_adjectives` are not mined), never one of the same attribute group as an adjective
  already there ("a red brown horse"), never one nearly always true of the noun (`TYPICAL_SHARE`
  of its corpus adjectives, or `typical_attributes`: "a white plate", "a green field"), never
  between the words of a compound (`compounds`, or a modifier nearly always there: "a teddy
  brown bear", "a hot fresh dog"), `a`/`an` fixed; a noun with no adjectives of its own gets one
  from all the corpus's adjectives only of a group that fits its class (size / age for a person,
  size / colour for a thing, none for a place: not "a young mirror").
"""
from __future__ import annotations

import random
from functools import lru_cache

import compclip.datagen.negatives.lexicon as lexicon
from compclip.datagen.negatives.attributes import makes_unit, typical_adjectives
from compclip.datagen.negatives.base import register_negative
from compclip.datagen.negatives.guards import animacy, fits, place, subject_verb, verb_need
from compclip.datagen.negatives.replace import vocab_or_builtin
from compclip.datagen.negatives.swap import pick
from compclip.datagen.negatives.text import article_for, insert_at, render, view
from compclip.datagen.negatives.vocab import (ADJ_STOP, ATTRIBUTE_GROUPS, ATTRIBUTE_OF, MASS_NOUNS,
                                     POSITION_NOUNS, crude_lemma, general_terms, is_part_noun,
                                     noun_roles, remember, synonyms_among)
from compclip.shardset.schema import Negative

_PLURAL_AUX = {"is": "are", "was": "were", "has": "have", "'s": "are"}
_RELATIVE = {"that", "who", "which"}
# English adjective order by attribute group; adjectives of no group (opinion) come first.
_ORDER = {"size": 1, "age": 2, "temperature": 3, "state": 3, "colour": 4, "material": 5}


def _order(adj: str) -> int:
    return _ORDER.get(ATTRIBUTE_OF.get(adj, ""), 0)


# Where and how an object is added (`add_obj`): after a chunk, before it, with "with", or as a
# place at the end of the caption (SugarCrepe's LLM-written additions vary the same way).
TEMPLATES = ("and", "before", "with", "next to", "near")


def _end(v) -> int:
    """The token after the caption's last word (before closing punctuation)."""
    end = len(v)
    while end > 0 and v.pos[end - 1] == "PUNCT":
        end -= 1
    return end


# what a person or animal is not "with" (carrying, holding, wearing): furniture, places
_NOT_HELD = {"furniture", "place"}
_NEAR = {"next", "near", "beside", "by"}  # "next to a map next to a cake": one neighbour is enough
# places, scenes, weather and times of day get no neighbour ("in the air next to a man", "in the
# rain next to a shirt", "in the deli next to a pan"): scenery, the places of swap_categories
# and the lexicon's `settings`
_SETTINGS = lexicon.words("settings")


# Attribute groups an adjective drawn from all the corpus's adjectives (`adj/*`, when the head
# noun has none of its own) may come from: "a young mirror", "the tall rain", "an orange boy"
# came from there.
_FALLBACK_GROUPS = {cls: frozenset(w for g in groups for w in ATTRIBUTE_GROUPS[g].split())
                    for cls, groups in {"person": ("size", "age"), "animal": ("size", "age", "colour"),
                                        "thing": ("size", "colour"), "place": ()}.items()}


def _setting(word: str) -> bool:
    """A place, scene, weather or time of day: no "next to a Y" after it."""
    return place(word) or word in _SETTINGS or crude_lemma(word) in _SETTINGS


def _addable_words(voc, bucket: str) -> frozenset:
    """The addable words of a bucket; remembered on the vocabulary."""
    cache = voc.__dict__.setdefault("_add_bucket_sets", {})
    found = cache.get(bucket)
    if found is None:
        found = cache[bucket] = frozenset(w for w in voc.words(bucket) if _addable(w))
    return found


def _synonyms(voc, nouns: tuple[str, ...]) -> frozenset:
    """Every word of the vocabulary that is a synonym or hypernym of one of `nouns` (or one of
    them); remembered on the vocabulary, per noun and per caption's nouns."""
    cache = voc.__dict__.setdefault("_add_synonyms", {})
    found = cache.get(nouns)
    if found is None:
        if len(nouns) != 1:
            found = frozenset().union(*(_synonyms(voc, (n,)) for n in nouns))
        else:
            if "_add_all_words" not in voc.__dict__:  # the whole vocabulary, by lemma, its general terms
                words = frozenset(w for entries in voc.buckets.values() for w, _ in entries)
                by_lemma = _by_lemma(words)
                voc.__dict__["_add_all_words"] = words, by_lemma, general_terms(words, by_lemma)
            found = synonyms_among(nouns[0], *voc.__dict__["_add_all_words"])
        remember(cache, nouns, found, "add_synonyms")
    return found


def _without_synonyms(voc, bucket: str, nouns: tuple[str, ...]) -> frozenset:
    """The addable words of a bucket less the synonyms and hypernyms of `nouns`; remembered on
    the vocabulary (a caption's candidates ask for the same ones again and again)."""
    cache = voc.__dict__.setdefault("_add_without_synonyms", {})
    key = (bucket, nouns)
    found = cache.get(key)
    if found is None:
        words, drop = _addable_words(voc, bucket), _synonyms(voc, nouns)
        found = words - drop if not drop.isdisjoint(words) else words
        remember(cache, key, found, "add_without_synonyms")
    return found


def _by_lemma(words: frozenset[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for w in words:
        out.setdefault(crude_lemma(w), []).append(w)
    return out


@lru_cache(maxsize=1 << 16)
def _addable(word: str) -> bool:
    """An object one can add: no scenery or event ("a dog with a street", "next to the sky",
    "next to a game"), no place ("a cat and a kitchen", "next to a room") and no other setting
    ("a man near a runway", "next to a sunset"): what `_setting` names."""
    return not _setting(word)


def _draw(voc, rng: random.Random, buckets: list[str], head: str, nouns: tuple[str, ...],
          avoid, accept=None) -> str | None:
    """A noun from the first bucket that has one, by corpus frequency: addable, not in the
    caption, no synonym or hypernym of any of its nouns ("a woman holding a pizza and a
    lady"), and taken by `accept` (the scene check) if given."""
    for bucket in buckets:
        keep = _without_synonyms(voc, bucket, nouns) if hasattr(voc, "words") else None
        if keep == set():
            continue
        new = voc.sample(rng, [bucket], head, avoid=avoid, keep=keep, accept=accept)
        if new is not None:
            return new
    return None


def _misread(v, c) -> bool:
    """The tagger cut or stretched the chunk, so its head is not the object: "a"/"an" ...
    singular noun + plural head, a verb taken for a noun ("A giraffe stares" read as one chunk
    with the head "stares"; not "a few cows"); or the object goes on after it, a particle or a
    noun taken for a verb ("A red pick | up truck", "A woman | surfer riding": a singular noun
    is never followed by its own verb's plain present form)."""
    after = v.tags[c.end] if c.end < len(v) else ""
    return (after == "RP" or (after == "VBP" and v.tags[c.head] == "NN")
            or (v.tags[c.head] == "NNS" and v.lower[c.start] in ("a", "an")
                and c.head > c.start + 1 and v.tags[c.head - 1] == "NN"))


@register_negative("add", "obj")
def add_obj(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v, voc = view(doc), vocab_or_builtin(vocab)
    chunks = [c for c in v.chunks if v.lower[c.head].isalpha() and v.tags[c.head] in ("NN", "NNS")
              and not is_part_noun(v, c) and not _misread(v, c)
              and (c.end == len(v) or v.tags[c.end] not in ("CC", ",", "HYPH", "POS"))]
    end = _end(v)
    nouns = tuple(v.lower[c.head] for c in v.chunks)
    cands = []
    last = v.chunk_at[end - 1] if end > 0 else -1
    setting = last >= 0 and _setting(v.lower[v.chunks[last].head])
    for c in chunks:
        # the subject (the caption's first words) only: "riding a man and a horse", "wearing a
        # hat and a table" show that an object of a verb rarely takes a companion
        if c.start == 0 and _addable(v.lower[c.head]):  # "a dog and a cat are ..."
            cands += [(c, "and"), (c, "before")]
            if c.end == len(v) or v.pos[c.end] != "ADP":  # not "A woman with a table in blue jacket"
                cands.append((c, "with"))
    if setting:
        # the caption ends on a place: the neighbour stands by the subject, right before its
        # verb or preposition ("A man next to a dog flying a kite in the air", not "... in the air next to a
        # dog"); by any other object it read badly in the judged sample ("a black pattern near
        # a man on the floor", "the next pitch next to a camera in a game": 2 of 10 passed)
        subject = [c for c in chunks[:1] if c is not v.chunks[last] and all(  # "A group of [people]",
                       v.lower[i] in ("of", "and") or v.chunk_at[i] >= 0         # "A horse and [a dog]"
                       for i in range(c.start))
                   and not _setting(v.lower[c.head]) and c.end < len(v)
                   and (v.pos[c.end] in ("VERB", "AUX", "ADP") or v.lower[c.end] in _RELATIVE)
                   and v.lower[c.end] not in _NEAR | {"of", "with", "in"}]  # "A cat next to a dog on a bed in a room"
        cands += [(c, t) for c in subject for t in TEMPLATES[3:]]
    elif (chunks and last >= 0
            and not _NEAR & set(v.lower[max(0, v.chunks[last].start - 2):v.chunks[last].start])):
        cands += [(v.chunks[last], t) for t in TEMPLATES[3:]]  # ends on an object: a neighbour

    # the added object fits the scene: the caption's things and verbs ("giraffes ... near a desk" is out)
    accept = voc.scene_check(v) if hasattr(voc, "scene_check") else None

    def build(ct):
        c, template = ct
        roles = noun_roles(v, c)
        buckets = [f"with/{crude_lemma(v.lower[c.head])}"] + [f"noun/NN/{role}" for role in roles]
        new = _draw(voc, rng, buckets, v.lower[c.head], nouns, v.lemmas, accept)
        if new is None:
            return None
        x_alive, y_alive = animacy(v.lower[c.head]) is not None, animacy(new) is not None
        if template in ("and", "before") and x_alive != y_alive:
            return None  # a person or animal with a thing as co-subject: "two zebras and a camera standing"
        if template == "with" and (lexicon.categories().get(crude_lemma(new)) in _NOT_HELD if x_alive
                                   else y_alive):
            return None  # "The polar bear with a chair", "A blue bicycle with a man"
        if template in ("and", "before"):  # a co-subject must be able to do what X does
            verb = subject_verb(v, c, c.start == 0)
            if verb is not None and (not fits(animacy(new), verb_need(v.lower[verb]))
                                     or (c.start == 0 and v.tags[verb] == "VBZ")):
                return None  # "A pizza and two men playing a video game", "a man and a plane flies"
        phrase = ["some" if new in MASS_NOUNS else article_for(new), new]  # "next to some food"
        if template in TEMPLATES[3:]:  # a thing beside the last object, or beside the subject
            if lexicon.categories().get(crude_lemma(new)) == "clothing":
                return None  # "in the rain next to a shirt": clothes are worn, not beside one
            at = end if last >= 0 and c is v.chunks[last] else c.end
            return render(insert_at(v, at, [*template.split(), *phrase]), v.cap)
        if template == "with":
            return render(insert_at(v, c.end, ["with", *phrase]), v.cap)
        if template == "before":
            pieces = insert_at(v, c.start, [*phrase, "and"])
        else:
            pieces = insert_at(v, c.end, ["and", *phrase])
        if c.end < len(v) and "_subj" in roles:
            aux = c.end + (v.lower[c.end] in _RELATIVE and c.end + 1 < len(v))
            if v.lower[aux] in _PLURAL_AUX:
                pieces[aux + 3] = (_PLURAL_AUX[v.lower[aux]], pieces[aux + 3][1])
            elif any(t == "VBZ" or w in _PLURAL_AUX for t, w in zip(v.tags[c.end:], v.lower[c.end:])):
                return None  # "a horse with a mane is ...": the verb is too far to agree
        return render(pieces, v.cap)
    return pick(v, rng, cands, build, "add", "obj", limit)


@register_negative("add", "att")
def add_att(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v, voc = view(doc), vocab_or_builtin(vocab)
    chunks = [c for c in v.chunks if v.lower[c.head].isalpha() and v.tags[c.head] in ("NN", "NNS")
              and v.lower[c.head] not in POSITION_NOUNS]

    def build(c):
        head = v.lower[c.head]
        avoid = v.lemmas
        for a in c.adjectives:
            group = ATTRIBUTE_OF.get(v.lower[a])
            if group:
                avoid = avoid | set(ATTRIBUTE_GROUPS[group].split())
        typical = typical_adjectives(voc, head)
        avoid = avoid | typical
        new = voc.sample(rng, [f"adj/{head}"], head, avoid=avoid) if f"adj/{head}" in getattr(voc, "buckets", ()) else None
        if new is None:  # any corpus adjective, of a group that fits the noun's class
            fit = _FALLBACK_GROUPS[animacy(head) or ("place" if _setting(head) else "thing")]
            new = voc.sample(rng, ["adj/*"], head, avoid=avoid, keep=fit) if fit else None
        if new is None:
            return None
        first = c.start
        for i in range(c.start, c.noun_start):
            if v.tags[i] == "POS":
                first = i + 1
        while first < c.noun_start and (v.tags[first] in ("DT", "PDT", "PRP$", "CD")
                                        or v.lower[first] in ADJ_STOP):
            first += 1
        rank, at = _order(new), first
        while at < c.noun_start and ((v.pos[at] == "ADJ" and _order(v.lower[at]) <= rank)
                                     or (at in v.modifiers and v.pos[at] != "VERB")):
            at += 1
        while at > first and makes_unit(v, at, typical):  # "a brown teddy bear", not "a teddy brown bear"
            at -= 1
        return render(insert_at(v, at, [new]), v.cap)
    return pick(v, rng, chunks * limit, build, "add", "att", limit)
