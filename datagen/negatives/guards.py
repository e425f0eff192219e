"""Guards that keep a noun swap a scene that can exist: animacy, agency and the relation.

A swap of two objects almost always describes an impossible scene when it exchanges a person
or animal with a thing ("A helmet is wearing a dog", "A bathroom sink sitting on top of a black
cat"). `swap_allowed(v, a, b)` keeps a swap of the noun chunks `a` and `b` only when

- whichever chunk becomes the subject of an agentive verb can be its subject (`agent_verbs`:
  "riding", "holding", "wearing" need a person; "eating", "looking", "walking" a person or an
  animal), so "A horse riding a man" and "A helmet is wearing a dog" are out;
- neither starts with a possessive pronoun ("his bike": moved before its owner, "his" no
  longer refers to anyone);
- both are animate (a person or an animal: `animacy` and the person / animal hypernym lists of
  `data/lexicon.json`) or both are things ("A table sitting at a woman" is out);
- both are places or surroundings (`scenery`, the places of `swap_categories`) or neither is
  ("a large ocean in the middle of the ship");
- (without `strict`) a thing that is a verb's direct object only trades places with another
  verb's object ("A man holding a tennis court in his hand while on the tennis racket");

and, with `strict`, also when (swap:obj takes only strict pairs; the sub-kinds named after NegCLIP's types take
the strict pairs when a caption has any, then the allowed ones, then any pair: `swap._swap_pairs`)
- the relation between them does not read the same both ways ("a man standing next to a woman"
  -> "a woman standing next to a man" says the same: `symmetric_relations`), unless the second
  one does something of its own;
- a person and an animal are not swapped around a relation in which one carries the other ("a
  man on a horse": `support_relations`), nor inside a collective ("a herd of [elephants]");
- two things are swapped only around a spatial relation with two different sides
  (`asymmetric_relations`: "a bus in front of a building", "a road sign on top of a stop
  sign"), with no verb of either between them, and around a carrying relation ("on", "in")
  only when both are one kind of thing (`swap_categories`: a sign on a sign, not "a desk on a
  laptop").

Lists live in the lexicon; the functions here only read the tagged caption (`text.View`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import compclip.datagen.negatives.lexicon as lexicon
from compclip.datagen.negatives.text import Chunk, View
from compclip.datagen.negatives.vocab import POSITION_NOUNS

SYMMETRIC = lexicon.words("symmetric_relations")
ASYMMETRIC = lexicon.words("asymmetric_relations")
SUPPORT = lexicon.words("support_relations")
SCENERY = lexicon.words("scenery")
_SKIP_TO_VERB = {"who", "that", "which"}
_RELATION_FILLER = {"the", "a", "an", "of", "to", "is", "are", "was", "were", "that", "which",
                    "sitting", "standing"}


@lru_cache(maxsize=1)
def _animacy() -> dict[str, str]:
    """`{word: "person" | "animal"}` from the lexicon's `animacy` lists and the closed person /
    animal hypernym lists (animal covers the birds)."""
    hyper = lexicon.hypernyms()
    out: dict[str, str] = {}
    for cls, generals in (("person", ("person", "player", "people")),
                          ("animal", ("animal", "bird", "animals", "dog", "cat"))):
        for general in generals:
            for word in {general} | hyper.get(general, set()):
                out.setdefault(word, cls)
    for cls, words in lexicon.lexicon()["animacy"].items():
        for word in words.split():
            out.setdefault(word, cls)
    return out


@lru_cache(maxsize=1 << 16)
def animacy(word: str) -> Optional[str]:
    """"person", "animal", or None for a thing (plurals by crude lemma: "horses")."""
    from compclip.datagen.negatives.text import crude_lemma
    table = _animacy()
    w = word.lower()
    return table.get(w) or table.get(crude_lemma(w))


@lru_cache(maxsize=1 << 16)
def kind_of(word: str) -> Optional[str]:
    """The kind of thing `word` names (`swap_categories` over the hypernym lists: "food",
    "vehicle", "place" ...), by its crude lemma first, else as written; None if unknown."""
    from compclip.datagen.negatives.text import crude_lemma
    table = lexicon.categories()
    return table.get(crude_lemma(word)) or table.get(word)


@lru_cache(maxsize=1)
def _agent_verbs() -> dict[str, str]:
    out: dict[str, str] = {}
    for need in ("person", "animate"):  # a verb in both lists needs only an animate subject
        for verb in lexicon.lexicon()["agent_verbs"][need].split():
            out[verb] = need
    return out


@lru_cache(maxsize=4096)
def verb_need(verb: str) -> Optional[str]:
    """What the subject of `verb` (regular forms: rides, riding, petting, watched) must be:
    "person", "animate", or None (anything can "sit", "stand", "lie")."""
    table = _agent_verbs()
    w = verb.lower()
    forms = [w]
    if w.endswith("ing") and len(w) > 4:
        stem = w[:-3]
        forms += [stem, stem + "e"]
        if len(stem) > 2 and stem[-1] == stem[-2]:
            forms.append(stem[:-1])  # sitting -> sit
    if w.endswith("ies"):
        forms.append(w[:-3] + "y")
    if w.endswith("es"):
        forms.append(w[:-2])
    if w.endswith("s"):
        forms.append(w[:-1])
    if w.endswith("ed") and len(w) > 4:
        forms += [w[:-2], w[:-1]]
    for f in forms:
        if f in table:
            return table[f]
    return None


def subject_verb(v: View, c: Chunk, first: bool) -> Optional[int]:
    """The token of the verb whose subject sits in chunk `c`'s place: the verb right after it
    (past "who / that / which", auxiliaries and adverbs: "a dog [is] wearing", "a man [who is]
    riding"), or for the caption's subject (`first`) the first verb after it ("A man in a red
    shirt is riding ...")."""
    j = c.end
    while j < len(v) and (v.lower[j] in _SKIP_TO_VERB or v.pos[j] in ("AUX", "ADV", "PART")):
        j += 1
    if j < len(v) and v.pos[j] == "VERB":
        return j
    if first:
        for k in range(c.end, len(v)):
            if v.pos[k] == "VERB":
                return k
    return None


@lru_cache(maxsize=1 << 16)
def place(word: str) -> bool:
    """A place or surroundings (`scenery`, or a place of `swap_categories`: kitchen, street,
    ocean ...), which is swapped only with another place."""
    from compclip.datagen.negatives.text import crude_lemma
    lemma = crude_lemma(word)
    return (word in SCENERY or lemma in SCENERY
            or kind_of(word) == "place")


@lru_cache(maxsize=1 << 14)
def noun_class(word: str) -> tuple[Optional[str], bool]:
    """(person / animal / None, place or not): a replacement keeps both."""
    return animacy(word), place(word)


def verb_object(v: View, c: Chunk) -> bool:
    """The chunk is the direct object of a verb ("holding [a racket]", "drives [a car]")."""
    i = c.start - 1
    while i >= 0 and v.pos[i] in ("ADV", "PART") and v.tags[i] != "TO":
        i -= 1
    return i >= 0 and v.pos[i] == "VERB"


def fits(cls: Optional[str], need: Optional[str]) -> bool:
    return need is None or (need == "person" and cls == "person") or (need == "animate" and cls is not None)


def _collective(v: View, c: Chunk) -> bool:
    """The chunk follows "<group noun> of" ("a herd of [elephants]", "a crowd of [people]")."""
    return c.start >= 2 and v.lower[c.start - 1] == "of" and v.lower[c.start - 2] in POSITION_NOUNS


def same_category(v: View, a: tuple[int, int], b: tuple[int, int]) -> bool:
    """The last words of both spans name one kind of thing (`swap_categories` in the lexicon:
    two people or animals, two foods, two pieces of furniture ...): "a woman ... a child"
    swaps into a scene that can exist, "a dog ... a helmet" rarely does."""
    ca, cb = kind_of(v.lower[a[1] - 1]), kind_of(v.lower[b[1] - 1])
    return ca is not None and ca == cb


def swap_allowed(v: View, a: Chunk, b: Chunk, strict: bool = True) -> bool:
    """May the noun chunks `a` and `b` (or their heads) trade places? See the module docstring."""
    if b.start < a.start:
        a, b = b, a
    if v.tags[a.start] == "PRP$" or v.tags[b.start] == "PRP$":
        return False
    ca, cb = animacy(v.lower[a.head]), animacy(v.lower[b.head])
    first = v.chunks[0] is a and not any(p in ("VERB", "AUX") for p in v.pos[:a.start])
    va, vb = subject_verb(v, a, first), subject_verb(v, b, False)
    if va is not None and not fits(cb, verb_need(v.lower[va])):
        return False
    if vb is not None and not fits(ca, verb_need(v.lower[vb])):
        return False
    if (ca is None) != (cb is None):
        return False  # "A suit in a striped man", "A table sitting at a woman"
    if place(v.lower[a.head]) != place(v.lower[b.head]):
        return False  # "a large ocean in the middle of the ship", "a bathroom in this small sink"
    if not strict:  # a thing that is a verb's object trades places only with another one
        return ca is not None or verb_object(v, a) == verb_object(v, b)  # "holding a tennis court"
    between = range(a.end, b.start)
    words = [v.lower[i] for i in between]
    if ca is None:  # two things: only around a spatial relation with two different sides
        if not any(w in ASYMMETRIC for w in words) or any(w in SYMMETRIC for w in words):
            return False
        for i in between:  # nothing but the relation between them ("in front of", "on top of")
            if not (v.lower[i] in ASYMMETRIC or v.lower[i] in _RELATION_FILLER
                    or v.lower[i] in POSITION_NOUNS or v.pos[i] in ("ADV", "AUX", "PUNCT")):
                return False
        if any(w in SUPPORT for w in words):
            return same_category(v, (a.start, a.end), (b.start, b.end))
        return True
    if ca != cb and (any(w in SUPPORT for w in words) or _collective(v, a) or _collective(v, b)):
        return False  # "a man on a horse", "a herd of elephants"
    # two animates: not around a relation that reads both ways ("a man next to a woman")
    if any(w in SYMMETRIC for w in words) and all(
            v.chunk_at[i] < 0 and (v.pos[i] in ("AUX", "ADV", "VERB", "ADP", "PART", "DET", "CCONJ", "PUNCT")
                                   or v.lower[i] in SYMMETRIC) for i in between):
        return vb is not None  # unless the second one does something of its own
    return True
