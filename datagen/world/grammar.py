"""The caption grammar: scenes to captions (`describe`) and captions back to scenes (`parse`).

    caption := ["there is" | "there are"] clause { [","] "and" clause } ["."]
    clause  := np [ ["is" | "are"] relation np ]
    np      := ("a" | "an" | "the") [size] colour shape
    relation:= "to the left of" | "left of" | "on the left of" | "to the right of" | ... | "above"
               | "over" | "below" | "under" | "beneath"       (see vocab.RELATION_PHRASES)
    size    := "small" | "little" | "large" | "big"

Case and a final period are ignored. An np with "a"/"an" introduces a new object; "the" refers
back to an earlier object of the same colour and shape (and size, if named), or introduces one.
Paraphrases come from `Style`: the template ("plain", "copula" with "is", "there" with "there
is"), the argument order (`inverse` states "B right of A" for "A left of B"), the relation phrase
variant, the size synonyms and definite articles. `parse(describe(scene, style))` is the same
scene for every style; anything outside the grammar raises `ParseError`, never a guess.
"""
from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, replace

from compclip.errors import CompclipError
from compclip.datagen.world.scene import Obj, Rel, Scene
from compclip.datagen.world.vocab import (ARTICLES, COLOURS, INVERSE, RELATION_PHRASES, SHAPES, SIZE_WORDS,
                                 article)

TEMPLATES = ("plain", "copula", "there")
_SYNONYMS = ({"small": "small", "large": "large"}, {"small": "little", "large": "big"})


class ParseError(CompclipError, ValueError):
    """A caption outside the grammar; the message names the caption and the unreadable part."""

    def __init__(self, caption: str, position: int, expected: str, tokens: list[str]):
        rest = " ".join(tokens[position:]) or "<end of caption>"
        super().__init__(f"cannot read caption {caption!r}: expected {expected} at '{rest}'")
        self.caption, self.unreadable, self.expected = caption, rest, expected


@dataclass(frozen=True)
class Style:
    template: str = "plain"  # plain | copula | there
    inverse: bool = False  # state each relation from its other argument
    variant: int = 0  # which phrasing of each relation (modulo the number of phrasings)
    synonyms: int = 0  # 0: small/large, 1: little/big
    definite: bool = False  # "the" instead of "a"/"an"
    capital: bool = False  # capitalise the first letter
    period: bool = False  # end with "."

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown template '{self.template}' (one of {TEMPLATES})")


def all_styles() -> list[Style]:
    """Every style (template x order x phrase variant x synonyms x articles x case/period)."""
    return [Style(t, inv, var, syn, d, cap, cap)
            for t, inv, var, syn, d, cap in itertools.product(
                TEMPLATES, (False, True), range(3), range(2), (False, True), (False, True))]


def random_style(rng: random.Random) -> Style:
    return Style(rng.choice(TEMPLATES), rng.random() < 0.5, rng.randrange(3), rng.randrange(2),
                 rng.random() < 0.15, rng.random() < 0.5, rng.random() < 0.5)


def paraphrase_style(style: Style, rng: random.Random) -> Style:
    """A style that words the same scene differently: other argument order, template or phrase."""
    other = [t for t in TEMPLATES if t != style.template]
    return replace(style, inverse=not style.inverse, template=rng.choice(other),
                   variant=rng.randrange(3))


# ---------------------------------------------------------------------------------- describe

def _np(o: Obj, style: Style, definite: bool) -> str:
    words = [_SYNONYMS[style.synonyms][o.size]] if o.size else []
    words += [o.colour, o.shape]
    art = "the" if definite else article(words[0])
    return f"{art} {' '.join(words)}"


def _rel(relation: str, style: Style) -> str:
    phrases = RELATION_PHRASES[relation]
    return phrases[style.variant % len(phrases)]


def _clauses(scene: Scene) -> list[tuple[int, Rel | None]]:
    """Which clause introduces each object, and the relation (if any) stated with it."""
    rels = list(scene.relations)
    plan: list[tuple[int, Rel | None]] = []
    first = next((r for r in rels if {r.subject, r.object} == {0, 1}), None)
    if len(scene.objects) >= 2:
        plan.append((1, first))
        if first:
            rels.remove(first)
    for k in range(2, len(scene.objects)):
        link = next((r for r in rels if k in (r.subject, r.object) and max(r.subject, r.object) == k),
                    None)
        if link:
            rels.remove(link)
            if link.object == k:  # make the new object the subject
                link = Rel(k, INVERSE[link.relation], link.subject)
        plan.append((k, link))
    if rels:
        raise ValueError(f"scene {scene} has relations no caption template states: {rels}")
    return plan


def first_relation(scene: Scene) -> Rel | None:
    """The relation the caption's first clause states (between objects 0 and 1), if any."""
    plan = _clauses(scene)
    return plan[0][1] if plan else None


def describe(scene: Scene, style: Style = Style()) -> str:
    """The caption of `scene` in `style`."""
    if not scene.objects:
        raise ValueError("a scene needs at least one object")
    objs, d = scene.objects, style.definite
    cop = " is" if style.template == "copula" else ""
    parts: list[str] = []
    if len(objs) == 1:
        parts.append(_np(objs[0], style, d))
    for k, rel in _clauses(scene):
        if k == 1:  # the first clause states objects 0 and 1
            if rel is None:
                a, b = (objs[1], objs[0]) if style.inverse else (objs[0], objs[1])
                parts.append(f"{_np(a, style, d)} and {_np(b, style, d)}")
            else:
                s, r, o = rel.subject, rel.relation, rel.object
                if style.inverse:
                    s, r, o = o, INVERSE[r], s
                parts.append(f"{_np(objs[s], style, d)}{cop} {_rel(r, style)} {_np(objs[o], style, d)}")
        elif rel is None:
            parts.append(f"and {_np(objs[k], style, d)}")
        elif style.inverse:  # "the <earlier> <inverse> a <new>"
            parts.append(f"and {_np(objs[rel.object], style, True)}{cop} "
                         f"{_rel(INVERSE[rel.relation], style)} {_np(objs[k], style, d)}")
        else:
            parts.append(f"and {_np(objs[k], style, d)}{cop} {_rel(rel.relation, style)} "
                         f"{_np(objs[rel.object], style, True)}")
    text = " ".join(parts)
    if style.template == "there":
        text = f"there {'are' if len(objs) > 1 and not scene.relations else 'is'} {text}"
    if style.capital:
        text = text[0].upper() + text[1:]
    return text + ("." if style.period else "")


# ------------------------------------------------------------------------------------- parse

_PHRASES = sorted(((tuple(p.split()), rel) for rel, ps in RELATION_PHRASES.items() for p in ps),
                  key=lambda x: -len(x[0]))
_TOKEN = re.compile(r"[a-z]+|,")


def _tokens(caption: str, original: str) -> list[str]:
    text = caption.strip().lower()
    if text.endswith("."):
        text = text[:-1]
    tokens = _TOKEN.findall(text)
    if "".join(tokens).replace(",", "") != re.sub(r"[\s,]", "", text):
        raise ParseError(original, 0, "only words, commas and a final period", [original])
    return tokens


class _Parser:
    def __init__(self, caption: str):
        self.caption = caption
        self.tokens = _tokens(caption, caption)
        self.i = 0
        self.objects: list[Obj] = []
        self.relations: list[Rel] = []

    def fail(self, expected: str):
        raise ParseError(self.caption, self.i, expected, self.tokens)

    def peek(self, n: int = 0) -> str | None:
        return self.tokens[self.i + n] if self.i + n < len(self.tokens) else None

    def accept(self, *words: str) -> bool:
        if self.peek() in words:
            self.i += 1
            return True
        return False

    def parse(self) -> Scene:
        if not self.tokens:
            self.fail("a noun phrase")
        if self.accept("there"):
            if not self.accept("is", "are"):
                self.fail("'is' or 'are' after 'there'")
        self.clause()
        while self.peek() is not None:
            self.accept(",")
            if not self.accept("and"):
                self.fail("'and' or the end of the caption")
            self.clause()
        return Scene(tuple(self.objects), tuple(self.relations))

    def clause(self) -> None:
        subject = self.np()
        if self.peek() in (None, ",", "and"):
            return
        start = self.i
        self.accept("is", "are")
        relation = self.relation()
        if relation is None:
            self.i = start
            self.fail("a relation (" + ", ".join(sorted({p for ps in RELATION_PHRASES.values()
                                                          for p in ps})) + ")")
        obj = self.np()
        if obj == subject:
            self.fail("a second, different object")
        self.relations.append(Rel(subject, relation, obj))

    def relation(self) -> str | None:
        for words, rel in _PHRASES:
            if tuple(self.tokens[self.i:self.i + len(words)]) == words:
                self.i += len(words)
                return rel
        return None

    def np(self) -> int:
        if self.peek() not in ARTICLES:
            self.fail("an article (a, an, the)")
        definite = self.tokens[self.i] == "the"
        self.i += 1
        size = SIZE_WORDS.get(self.peek() or "")
        if size:
            self.i += 1
        if self.peek() not in COLOURS:
            self.fail("a colour (" + ", ".join(COLOURS) + ")")
        colour = self.tokens[self.i]
        self.i += 1
        if self.peek() not in SHAPES:
            self.fail("a shape (" + ", ".join(SHAPES) + ")")
        obj = Obj(self.tokens[self.i], colour, size)
        self.i += 1
        if definite:  # refer back to an earlier matching object, if there is one
            for k, o in enumerate(self.objects):
                if o.binding == obj.binding and (size is None or o.size == size):
                    return k
        self.objects.append(obj)
        return len(self.objects) - 1


def parse(caption: str) -> Scene:
    """The scene a caption of the grammar describes; ParseError for anything else."""
    return _Parser(caption).parse()
