"""Replace negatives: one object, attribute or relation word changed for a corpus word.

Replacements come from a `Vocabulary` mined from the corpus (a small built-in one when none is
given), drawn by frequency from the bucket of the same part of speech and role, never a synonym
of the replaced word and never a word already in the caption:

| sub-kind | replaces                                   | drawn from                                  |
|----------|--------------------------------------------|---------------------------------------------|
| `obj`    | a chunk's head noun (NN or NNS)            | nouns of that tag after the same governor ("on a [bench]"), of the same class (person / animal / thing / place) and fitting the subject's verb, one kind of thing first, then nouns seen with the caption's other objects; fitting the rest of the scene (`scene.SceneModel`: on average no rarer than chance with the caption's other nouns and verbs, not "a zebra standing next to a toilet"); a person's gender is never changed while a pronoun of the old gender is in the caption (`gender` in the lexicon: "A woman taking a picture of himself"); a singular head keeps its countability (`mass_nouns`: not "crossing a water", not "a plate with fork" for "with rice") |
| `att`    | an adjective, not the first half of a unit ("polar bear", "high chair": `attributes.makes_unit`) | its attribute group (colour -> colour; for an animal, food, plant or place, but for size, only group mates seen with the head: no "blue dogs", "blue rice"), else only adjectives seen with the same head noun; never one an image cannot refute (`opinion_adjectives` are not mined: "beautiful", "delicious") |
| `rel`    | a verb (same tag) or a relation preposition | verbs seen before the same object noun or preposition (none without one), fitting the subject and seen in the corpus with a subject of its kind (person / animal / thing and kind of thing: no "A pizza parked", "A man grazing"); prepositions from `relation_contrasts` (on -> under, with -> without), never one of a time ("on a cloudy day") or of a fixed phrase ("across from"); a thing's posture verb (`posture_verbs`: "A pie sits on a plate") is never replaced |
"""
from __future__ import annotations

import random
from typing import Optional

from compclip.datagen.negatives.base import register_negative
from compclip.datagen.negatives.swap import pick
from compclip.datagen.negatives.text import View, match_case, render, replace_at, view
import compclip.datagen.negatives.lexicon as lexicon
from compclip.datagen.negatives.attributes import makes_unit, typical_adjectives
from compclip.datagen.negatives.guards import animacy, fits, kind_of, noun_class, place, subject_verb, verb_need
from compclip.datagen.negatives.vocab import (ADJ_STOP, ATTRIBUTE_GROUPS, ATTRIBUTE_OF, MASS_NOUNS, PREP_STOP,
                                     Vocabulary, builtin_vocabulary, crude_lemma, is_part_noun,
                                     noun_roles, remember, verb_roles)
from compclip.shardset.schema import Negative

# "on top of", "at the edge of", "across from": the preposition is part of a fixed phrase
FIXED_AFTER_PREP = lexicon.words("fixed_after_prep")
FIXED_BEFORE_PREP = lexicon.words("fixed_before_prep")  # "next to", "close to", "out of"
CONTRASTS: dict[str, str] = lexicon.lexicon()["relation_contrasts"]
TIMES = lexicon.words("times")  # "on a cloudy day", "at night": no relation between two things
POSTURE = frozenset(lexicon.words("posture_verbs"))  # a cup sitting / lying on a table: the same

_GENDER = lexicon.lexicon()["gender"]
_GENDER_OF = {w: g for g in ("male", "female") for w in _GENDER[g].split()}
_PRONOUNS_OF = {w: g for g in ("male", "female") for w in _GENDER[f"{g}_pronouns"].split()}
_FALLBACK: Optional[Vocabulary] = None
_MATES = {group: frozenset(words.split()) for group, words in ATTRIBUTE_GROUPS.items()}


def vocab_or_builtin(vocab: Optional[Vocabulary]) -> Vocabulary:
    global _FALLBACK
    if vocab is not None:
        return vocab
    if _FALLBACK is None:
        _FALLBACK = builtin_vocabulary()
    return _FALLBACK


def _plain(v: View, i: int) -> bool:
    """A lower-case word (or the first word), not glued to a neighbour by a hyphen."""
    return (v.lower[i].isalpha() and (i == 0 or not v.words[i][:1].isupper())
            and i not in v.hyphenated)


def _replace(v: View, i: int, word: Optional[str]) -> Optional[str]:
    if word is None:
        return None
    return render(replace_at(v, i, match_case(word, v.words[i])), v.cap)


@register_negative("replace", "obj")
def replace_obj(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v, voc = view(doc), vocab_or_builtin(vocab)
    chunks = [c for c in v.chunks if v.tags[c.head] in ("NN", "NNS") and _plain(v, c.head)
              and c.noun_start == c.head and not is_part_noun(v, c) and not _compound_next(v, c)]

    plans: dict[int, tuple] = {}

    def plan(c):
        """The chunk's buckets, class / kind sets and the (bucket group, allowed words) tries in
        order (computed once: a chunk is drawn up to `limit` times)."""
        buckets = [f"noun/{v.tags[c.head]}/{role}" for role in noun_roles(v, c)]
        specific, general = buckets[:-1], buckets[-1:]  # the role's nouns, then all ("*")
        company = voc.company(v, skip=v.chunks.index(c)) if hasattr(voc, "company") else set()
        head = v.lower[c.head]
        cls, kind = noun_class(head), kind_of(head)
        verb = subject_verb(v, c, c.start == 0)
        need = verb_need(v.lower[verb]) if verb is not None else None
        same, mates = _class_sets(voc, tuple(buckets), cls, need, kind)
        # one kind of thing first (a cup for a bowl), then one class (a person for a person, a
        # place for a place, a thing for a thing), nouns seen with the caption's other objects
        # and in the same role first; never a person for a thing ("A cow holding an umbrella")
        tries = [(group, keep) for group, keep in (
            (specific, mates & company), (specific, mates), (specific, same & company),
            (specific, same), (general, mates & company), (general, mates), (general, same & company))
            if group and keep]
        # and one that fits the rest of the scene ("a zebra standing next to a toilet" is out)
        accept = voc.scene_check(v, without=crude_lemma(head)) if hasattr(voc, "scene_check") else None
        return buckets, head, cls, need, same, tries, accept

    pronouns = {_PRONOUNS_OF[w] for w in v.lower if w in _PRONOUNS_OF}

    def build(c):
        if c.start not in plans:
            plans[c.start] = plan(c)
        buckets, head, cls, need, same, tries, accept = plans[c.start]
        for group, keep in tries:
            new = voc.sample(rng, group, head, avoid=v.lemmas, keep=keep, accept=accept)
            if new is not None:
                if v.tags[c.head] == "NN" and _countable_clash(v, c, new):
                    return None  # "crossing a water", "a plate with fork"
                if _GENDER_OF.get(head) in pronouns and _GENDER_OF.get(new) not in (None, _GENDER_OF[head]):
                    # "A woman taking a picture of himself": not made. Rewriting the pronouns
                    # would need to know whom each refers to ("a man helping a woman with her
                    # bag": "her" is the woman's), so a gender change is left out instead
                    return None
                return _replace(v, c.head, new)
        fallback = getattr(voc, "fallback", None)
        if fallback is not None and all(crude_lemma(w) in v.lemmas for w in same):
            # the corpus has no other noun of that class (a tiny corpus): built-in ones
            keep, _ = _class_sets(fallback, tuple(buckets), cls, need, None)
            return _replace(v, c.head, fallback.sample(rng, buckets, head, avoid=v.lemmas,
                                                       keep=set(keep)) if keep else None)
        return None
    return pick(v, rng, chunks * limit, build, "replace", "obj", limit)


def _kind(noun: str) -> tuple:
    """What a subject is, for `_verbs_for_subject`: person / animal / thing, and its kind of
    thing (`swap_categories`: food, vehicle ...) if the lexicon knows it."""
    return animacy(noun), kind_of(noun)


def _subject_kinds(voc, verb: str) -> frozenset:
    """The kinds (`_kind`) and lemmas of the nouns the corpus has as subjects of `verb`
    (`noun/NN/subj:<verb>`, `noun/NNS/subj:<verb>`); remembered on the vocabulary."""
    cache = voc.__dict__.setdefault("_replace_subject_kinds", {})
    found = cache.get(verb)
    if found is None:
        buckets = getattr(voc, "buckets", {})
        nouns = [w for tag in ("NN", "NNS") for w, _ in buckets.get(f"noun/{tag}/subj:{verb}", ())]
        found = cache[verb] = frozenset([_kind(n) for n in nouns] + [crude_lemma(n) for n in nouns])
    return found


def _verbs_for_subject(voc, buckets: tuple, subject: str) -> frozenset:
    """The verbs of `buckets` that suit `subject`: fitting its class (`verb_need`), and either
    seen in the corpus with a subject of its kind (or with it) or never seen with any subject
    (no evidence either way); remembered on the vocabulary."""
    cache = voc.__dict__.setdefault("_replace_verbs_for_subject", {})
    kind, lemma = _kind(subject), crude_lemma(subject)
    key = (buckets, kind, lemma)
    found = cache.get(key)
    if found is None:
        found = frozenset(w for b in buckets for w in voc.words(b)
                          if fits(kind[0], verb_need(w))
                          and (not (seen := _subject_kinds(voc, w)) or kind in seen or lemma in seen))
        remember(cache, key, found, "replace_verbs_for_subject")
    return found


_DETERMINERS = ("DT", "PDT", "PRP$", "CD", "POS", "WP$")  # tags that make a noun phrase not bare


def _countable_clash(v: View, c, new: str) -> bool:
    """A singular head replaced by `new` would read wrong: a mass noun after a/an ("crossing a
    water"), or a countable noun where a mass noun stood without a determiner ("a plate with
    fork" for "a plate with rice")."""
    before = v.lower[c.start:c.head]
    if "a" in before or "an" in before:
        return new in MASS_NOUNS
    bare = not any(v.tags[i] in _DETERMINERS for i in range(c.start, c.head))
    return bare and v.lower[c.head] in MASS_NOUNS and new not in MASS_NOUNS


def _class_sets(voc, buckets: tuple, cls, need, kind) -> tuple[frozenset, frozenset]:
    """The nouns of `buckets` of class `cls` that can be the subject of a verb needing `need`
    ("A pole wearing a pointy pink shoe" is out), and those of them of one kind `kind`;
    remembered on the vocabulary (captions ask for the same few combinations again and again)."""
    cache = voc.__dict__.setdefault("_replace_class_sets", {})
    key = (buckets, cls, need, kind)
    if key not in cache:
        same: set = set()
        mates: set = set()
        for b in buckets:
            for (c, a), (words, by_kind) in _word_classes(voc, b).items():
                if c == cls and fits(a, need):
                    same.update(words)
                    if kind is not None:
                        mates.update(by_kind.get(kind, ()))
        remember(cache, key, (frozenset(same), frozenset(mates)), "replace_class_sets")
    return cache[key]


def _word_classes(voc, bucket: str) -> dict[tuple, tuple[list[str], dict[str, list[str]]]]:
    """The nouns of `bucket` by (class, animacy): their list and their lists by kind of thing;
    remembered on the vocabulary."""
    classes = voc.__dict__.setdefault("_replace_word_classes", {})
    if bucket not in classes:
        groups: dict[tuple, tuple[list[str], dict[str, list[str]]]] = {}
        for w in voc.words(bucket):
            words, by_kind = groups.setdefault((noun_class(w), animacy(w)), ([], {}))
            words.append(w)
            k = kind_of(w)
            if k is not None:
                by_kind.setdefault(k, []).append(w)
        classes[bucket] = groups
    return classes[bucket]


def _compound_next(v: View, c) -> bool:
    """The tagger cut a compound: a singular head followed by a noun or a base-form verb
    ("a teddy [bear]" tagged VBP) is the first half of a compound, not an object."""
    return (v.tags[c.head] == "NN" and c.end < len(v)
            and v.tags[c.end] in ("NN", "NNS", "NNP", "VB", "VBP"))


def _head_of(v: View, i: int) -> Optional[str]:
    for c in v.chunks:
        if c.start <= i < c.end:
            return v.lower[c.head]
    return None


def _natural(head: Optional[str]) -> bool:
    """An animal, a food, a plant or a place: its colour, material, age or state is not free
    (a bus can be any colour, a dog or rice cannot)."""
    return bool(head) and (animacy(head) == "animal" or kind_of(head) in ("food", "plant") or place(head))


@register_negative("replace", "att")
def replace_att(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v, voc = view(doc), vocab_or_builtin(vocab)
    adjs = [i for i in range(len(v)) if v.pos[i] == "ADJ" and v.tags[i] == "JJ"
            and _plain(v, i) and v.lower[i] not in ADJ_STOP]

    def build(i):
        word, head = v.lower[i], _head_of(v, i)
        if head and i + 1 < len(v) and makes_unit(v, i + 1, typical_adjectives(voc, head)):
            return None  # half of one thing: "a polar bear", "a high chair"
        group = ATTRIBUTE_OF.get(word)
        own = [f"adj/{head}"] if head else []
        if group is None or (group != "size" and _natural(head)):
            # no group to stay in, or an animal, food, plant or place: only adjectives seen with
            # the head ("a low position" -> "a black position", "two blue dogs", "blue rice",
            # "a young street" came from all the corpus's)
            new = voc.sample(rng, own, word, avoid=v.lemmas, keep=_MATES.get(group)) if own else None
        else:
            mates = _MATES[group]
            new = voc.sample(rng, own + ["adj/*"], word, avoid=v.lemmas, keep=mates)
            if new is None:  # the corpus lacks group mates: use the group list itself
                new = Vocabulary({"g": [(w, 1) for w in sorted(mates)]}).sample(
                    rng, ["g"], word, avoid=v.lemmas)
        return _replace(v, i, new)
    return pick(v, rng, adjs * limit, build, "replace", "att", limit)


def _of_time(v: View, i: int) -> bool:
    """The preposition `i` takes a time, not a thing: "on a cloudy day", "at night"."""
    c = v.chunk_at[i + 1] if i + 1 < len(v) else -1
    return c >= 0 and v.chunks[c].start == i + 1 and v.lower[v.chunks[c].head] in TIMES


@register_negative("replace", "rel")
def replace_rel(doc, rng: random.Random, *, vocab=None, limit: int = 1) -> list[Negative]:
    v, voc = view(doc), vocab_or_builtin(vocab)
    slots = [i for i in range(len(v)) if _plain(v, i) and i not in v.modifiers and (
        (v.pos[i] == "VERB" and v.tags[i].startswith("VB"))
        or (v.tags[i] == "IN" and v.pos[i] == "ADP" and v.lower[i] not in PREP_STOP
            and (i + 1 == len(v) or v.lower[i + 1] not in FIXED_AFTER_PREP) and not _of_time(v, i)
            and (i == 0 or v.lower[i - 1] not in FIXED_BEFORE_PREP)))]

    subjects: dict[int, str] = {}  # verb token -> the head noun of its subject
    for c in v.chunks:
        at = subject_verb(v, c, c.start == 0) if not is_part_noun(v, c) else None  # "a group of [people]"
        if at is not None:
            subjects.setdefault(at, v.lower[c.head])

    def build(i):
        word = v.lower[i]
        if v.pos[i] != "VERB":  # a preposition: only one that changes the scene (on -> under)
            others = sorted(set(CONTRASTS.get(word, "").split()) - v.lemmas)
            return _replace(v, i, rng.choice(others)) if others else None
        if word in POSTURE and i in subjects and animacy(subjects[i]) is None:
            return None  # a thing sitting, standing or lying: each says where it is, and other
            # verbs make no scene ("A pie stands on a plate", "Assorted meal chewing on a plate")
        # a verb seen with the same object or preposition ("swinging" a racket), never one
        # that needs another kind of subject ("A stop sign holding") or that the corpus never
        # gives a subject of this kind ("A pizza parked", "A man grazing"), no role-less guess
        buckets = [f"verb/{v.tags[i]}/{role}" for role in verb_roles(v, i) if role != "*"]
        keep = _verbs_for_subject(voc, tuple(buckets), subjects[i]) if i in subjects else None
        return _replace(v, i, voc.sample(rng, buckets, word, avoid=v.lemmas, keep=keep))
    return pick(v, rng, slots * limit, build, "replace", "rel", limit)
