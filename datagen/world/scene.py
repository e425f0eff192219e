"""Scene specifications: which objects a scene holds and how they relate, nothing about pixels.

A `Scene` is a tuple of `Obj` (shape, colour, optional size class) plus relations between them
(`Rel(subject, relation, object)` by object index). The grammar maps scenes to captions and back,
the layout module places a scene's objects, and `Scene.key()` is the order-free identity used to
compare scenes ("A left of B" and "B right of A" have the same key).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

from compclip.datagen.world.vocab import COLOURS, INVERSE, RELATIONS, SHAPES, SIZES


@dataclass(frozen=True)
class Obj:
    shape: str
    colour: str
    size: Optional[str] = None  # "small" | "large" | None (medium, unnamed)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES or self.colour not in COLOURS or self.size not in SIZES + (None,):
            raise ValueError(f"unknown object {self}")

    @property
    def binding(self) -> tuple[str, str]:
        return (self.colour, self.shape)

    def phrase(self) -> str:
        """The noun phrase without article: '[size] colour shape'."""
        return " ".join(w for w in (self.size, self.colour, self.shape) if w)

    def slug(self) -> str:
        return self.phrase().replace(" ", "_")


@dataclass(frozen=True)
class Rel:
    subject: int
    relation: str  # one of RELATIONS
    object: int

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"unknown relation '{self.relation}'")

    def canonical(self) -> "Rel":
        """right -> left and below -> above, by exchanging the arguments."""
        if self.relation in ("right", "below"):
            return Rel(self.object, INVERSE[self.relation], self.subject)
        return self


@dataclass(frozen=True)
class Scene:
    objects: tuple[Obj, ...]
    relations: tuple[Rel, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for r in self.relations:
            if not (0 <= r.subject < len(self.objects) and 0 <= r.object < len(self.objects)) \
                    or r.subject == r.object:
                raise ValueError(f"relation {r} does not join two objects of {self.objects}")

    def key(self) -> tuple:
        """Order-free identity: sorted objects and canonical relations between object phrases."""
        objs = tuple(sorted(self.objects, key=lambda o: (o.shape, o.colour, o.size or "")))
        rels = tuple(sorted({(self.objects[c.subject], c.relation, self.objects[c.object])
                             for c in (r.canonical() for r in self.relations)},
                            key=repr))
        return (objs, rels)

    def same_as(self, other: "Scene") -> bool:
        return self.key() == other.key()

    def with_object(self, index: int, **changes) -> "Scene":
        objs = list(self.objects)
        objs[index] = replace(objs[index], **changes)
        return Scene(tuple(objs), self.relations)

    def relation_triples(self) -> set[tuple[str, str, str]]:
        """(subject shape, canonical relation, object shape) for every stated relation."""
        out = set()
        for r in self.relations:
            c = r.canonical()
            out.add((self.objects[c.subject].shape, c.relation, self.objects[c.object].shape))
        return out


def random_scene(rng: random.Random, n_objects: int = 2, related: bool = True,
                 third_related: Optional[bool] = None, size_prob: float = 0.5,
                 bindings: Optional[Sequence[tuple[str, str]]] = None) -> Scene:
    """A random scene of distinct (colour, shape) objects; the first two related if `related`.
    `bindings`: the (colour, shape) pairs its objects are drawn from (None: any colour, any shape)."""
    objs: list[Obj] = []
    while len(objs) < n_objects:
        size = rng.choice(SIZES) if rng.random() < size_prob else None
        if bindings is None:
            o = Obj(rng.choice(SHAPES), rng.choice(tuple(COLOURS)), size)
        else:
            colour, shape = rng.choice(bindings)
            o = Obj(shape, colour, size)
        if all(o.binding != p.binding for p in objs):
            objs.append(o)
    rels: list[Rel] = []
    if related and n_objects >= 2:
        rels.append(Rel(0, rng.choice(RELATIONS), 1))
    if n_objects >= 3:
        if third_related is None:
            third_related = rng.random() < 0.5
        if third_related:  # on the other axis than the first relation, so it always fits
            axis = ("above", "below") if rels and rels[0].relation in ("left", "right") \
                else ("left", "right")
            rels.append(Rel(2, rng.choice(axis), rng.randrange(2)))
    return Scene(tuple(objs), tuple(rels))
