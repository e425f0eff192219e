"""Hard negatives by scene manipulation: swap, replace and add, labelled as in the shard schema.

Each edit turns a scene into candidate negative scenes of one (kind, subkind); `negatives` words
every candidate with the positive caption's own style (so only the edited part of the text
changes), and keeps a candidate only if it is false of the image (`layout.satisfies`), reads
differently from the positive, and passes the caller's `allowed` filter (e.g. the training split).
Every negative is a scene, so it can always be rendered (TROHN-Img generated partners).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator

from compclip.datagen.negatives.base import normalise
from compclip.datagen.world.grammar import Style, describe
from compclip.datagen.world.layout import Layout, satisfies
from compclip.datagen.world.scene import Obj, Rel, Scene
from compclip.datagen.world.vocab import COLOURS, RELATIONS, SHAPES, SIZES

KINDS: tuple[tuple[str, str], ...] = (
    ("swap", "att"), ("swap", "obj"), ("swap", "rel"),
    ("replace", "att"), ("replace", "obj"), ("replace", "rel"),
    ("add", "obj"), ("add", "att"))
MAX_OBJECTS = 3


@dataclass(frozen=True)
class Edited:
    scene: Scene
    text: str
    kind: str
    subkind: str


def _pairs(scene: Scene) -> Iterator[tuple[int, int]]:
    n = len(scene.objects)
    return ((i, j) for i in range(n) for j in range(i + 1, n))


def _distinct(scene: Scene) -> bool:
    return len({o.binding for o in scene.objects}) == len(scene.objects)


def candidates(scene: Scene, kind: str, subkind: str) -> list[Scene]:
    """Every scene one edit of this (kind, subkind) away from `scene`."""
    objs, out = scene.objects, []
    if (kind, subkind) == ("swap", "att"):  # exchange colours, or named sizes, of two objects
        for i, j in _pairs(scene):
            if objs[i].colour != objs[j].colour:
                out.append(scene.with_object(i, colour=objs[j].colour).with_object(j, colour=objs[i].colour))
            if objs[i].size != objs[j].size and objs[i].size and objs[j].size:
                out.append(scene.with_object(i, size=objs[j].size).with_object(j, size=objs[i].size))
    elif (kind, subkind) == ("swap", "obj"):  # exchange the shapes (nouns) of two objects
        for i, j in _pairs(scene):
            if objs[i].shape != objs[j].shape:
                out.append(scene.with_object(i, shape=objs[j].shape).with_object(j, shape=objs[i].shape))
    elif (kind, subkind) == ("swap", "rel"):  # exchange the two arguments of a relation
        for k, r in enumerate(scene.relations):
            rels = list(scene.relations)
            rels[k] = Rel(r.object, r.relation, r.subject)
            out.append(Scene(objs, tuple(rels)))
    elif (kind, subkind) == ("replace", "att"):
        for i, o in enumerate(objs):
            out += [scene.with_object(i, colour=c) for c in COLOURS if c != o.colour]
            if o.size:
                out += [scene.with_object(i, size=s) for s in SIZES if s != o.size]
    elif (kind, subkind) == ("replace", "obj"):
        for i, o in enumerate(objs):
            out += [scene.with_object(i, shape=s) for s in SHAPES if s != o.shape]
    elif (kind, subkind) == ("replace", "rel"):
        for k, r in enumerate(scene.relations):
            for rel in RELATIONS:
                if rel != r.relation:
                    rels = list(scene.relations)
                    rels[k] = Rel(r.subject, rel, r.object)
                    out.append(Scene(objs, tuple(rels)))
    elif (kind, subkind) == ("add", "obj"):
        if len(objs) < MAX_OBJECTS:
            out += [Scene(objs + (Obj(s, c),), scene.relations) for s in SHAPES for c in COLOURS]
    elif (kind, subkind) == ("add", "att"):
        for i, o in enumerate(objs):
            if o.size is None:
                out += [scene.with_object(i, size=s) for s in SIZES]
    else:
        raise ValueError(f"no scene edit for ({kind}, {subkind}); one of {KINDS}")
    return [s for s in out if _distinct(s)]


def negatives(scene: Scene, layout: Layout, style: Style, rng: random.Random,
              kinds: tuple[tuple[str, str], ...] = KINDS,
              allowed: Callable[[Scene], bool] = lambda s: True) -> list[Edited]:
    """At most one true negative per (kind, subkind), in `kinds` order, worded in `style`."""
    seen = {normalise(describe(scene, style))}
    out = []
    for kind, subkind in kinds:
        pool = candidates(scene, kind, subkind)
        rng.shuffle(pool)
        for cand in pool:
            if not allowed(cand) or satisfies(layout, cand):
                continue
            text = describe(cand, style)
            if normalise(text) not in seen:  # new, and not a duplicate of an earlier negative
                seen.add(normalise(text))
                out.append(Edited(cand, text, kind, subkind))
                break
    return out


def mirror_scene(scene: Scene) -> Scene:
    """The scene seen in a mirror: left and right exchanged."""
    flip = {"left": "right", "right": "left"}
    return Scene(scene.objects, tuple(Rel(r.subject, flip.get(r.relation, r.relation), r.object)
                                      for r in scene.relations))
