"""Placing a scene's objects in the image plane, and the geometry that decides every relation.

A relation holds between two placed objects when their centres are separated along its axis by
at least a margin and the separation along the other axis is at most half of it (so "left of" and
"above" never both hold). Layouts are sampled then checked: sizes, centres, rotations and colour
shades are all random, so no fixed position or pixel value gives a relation or an object away.
The same `holds` function decides the truth of a caption against an image (`satisfies`).
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, replace

from compclip.datagen.world.scene import Obj, Scene
from compclip.datagen.world.vocab import COLOURS, INVERSE, RELATIONS, SIZE_RADIUS
from compclip.errors import CompclipError

MARGIN = 0.12  # minimum centre separation along a relation's axis, as a fraction of the side
SLOPE = 0.5  # maximum |off-axis| / |on-axis| separation for a relation to hold
GAP = 0.02  # minimum free space between two objects' bounding circles
COLOUR_JITTER = 18  # +- per RGB channel


class PlacementError(CompclipError, ValueError):
    """A scene whose relations cannot all hold at once in the image (e.g. contradictory)."""


@dataclass(frozen=True)
class Placed:
    obj: Obj  # fully specified: size None means the medium class
    cx: float  # centre, in pixels
    cy: float
    r: float  # bounding-circle radius, in pixels
    angle: float  # rotation, degrees
    rgb: tuple[int, int, int]

    def box(self) -> tuple[float, float, float, float]:
        return (self.cx - self.r, self.cy - self.r, self.cx + self.r, self.cy + self.r)


@dataclass(frozen=True)
class Layout:
    size: int
    objects: tuple[Placed, ...]


def holds(relation: str, a: tuple[float, float], b: tuple[float, float], size: float) -> bool:
    """Does `a <relation> b` hold for centres a, b in an image of side `size`? (y grows down)."""
    dx, dy = b[0] - a[0], b[1] - a[1]  # b minus a
    on, off = {"left": (dx, dy), "right": (-dx, dy), "above": (dy, dx), "below": (-dy, dx)}[relation]
    return on >= MARGIN * size and abs(off) <= SLOPE * on


def relations_between(layout: Layout) -> set[tuple[int, str, int]]:
    """Every (i, relation, j) that holds geometrically in a layout."""
    out = set()
    for (i, p), (j, q) in itertools.permutations(enumerate(layout.objects), 2):
        for rel in RELATIONS:
            if holds(rel, (p.cx, p.cy), (q.cx, q.cy), layout.size):
                out.add((i, rel, j))
    return out


def place(scene: Scene, size: int, rng: random.Random, max_tries: int = 4000) -> Layout:
    """Sample sizes, centres, rotations and shades so that every stated relation holds.

    Objects are placed in order: one that a relation ties to an earlier object is put at a random
    offset from it along the relation's axis (so chains of relations stay cheap to sample), any
    other uniformly at random; the whole layout is then checked and redrawn until valid."""
    for _ in range(max_tries):
        placed: list[Placed] = []
        for k, o in enumerate(scene.objects):
            lo, hi = SIZE_RADIUS[o.size]
            r = rng.uniform(lo, hi) * size
            cx, cy = _centre_for(scene, k, placed, r, size, rng)
            placed.append(Placed(o, cx, cy, r, 0.0, (0, 0, 0)))
        if _valid(scene, placed, size):  # now the rotation and the shade of each object
            return Layout(size, tuple(replace(p, angle=rng.uniform(-12, 12), rgb=_shade(p.obj, rng))
                                      for p in placed))
    raise PlacementError(f"cannot place {scene} in {size} px so that every relation holds "
                         f"({max_tries} tries): contradictory or too crowded")


def _shade(o: Obj, rng: random.Random) -> tuple[int, int, int]:
    return tuple(min(255, max(0, c + rng.randint(-COLOUR_JITTER, COLOUR_JITTER)))
                 for c in COLOURS[o.colour])


def _centre_for(scene: Scene, k: int, placed: list[Placed], r: float, size: int,
                rng: random.Random) -> tuple[float, float]:
    link = next(((rel.relation, rel.object) for rel in scene.relations
                 if rel.subject == k and rel.object < k), None)
    if link is None:
        link = next(((INVERSE[rel.relation], rel.subject) for rel in scene.relations
                     if rel.object == k and rel.subject < k), None)
    if link is None:
        return rng.uniform(r + 1, size - r - 1), rng.uniform(r + 1, size - r - 1)
    relation, j = link  # object k <relation> object j
    p = placed[j]
    on = rng.uniform(max(MARGIN * size, p.r + r + GAP * size), size)
    off = rng.uniform(-SLOPE, SLOPE) * on
    dx, dy = {"left": (-on, off), "right": (on, off), "above": (off, -on), "below": (off, on)}[relation]
    return p.cx + dx, p.cy + dy


def _valid(scene: Scene, placed: list[Placed], size: int) -> bool:
    for p in placed:
        if not (p.r + 1 <= p.cx <= size - p.r - 1 and p.r + 1 <= p.cy <= size - p.r - 1):
            return False
    for p, q in itertools.combinations(placed, 2):
        if math.hypot(p.cx - q.cx, p.cy - q.cy) < p.r + q.r + GAP * size:
            return False
    return all(holds(r.relation, (placed[r.subject].cx, placed[r.subject].cy),
                     (placed[r.object].cx, placed[r.object].cy), size) for r in scene.relations)


def satisfies(layout: Layout, spec: Scene, exhaustive: bool = False) -> bool:
    """Is the caption scene `spec` true of the image `layout`? Some injective match of spec
    objects to placed objects must agree on shape, colour and (where named) size, and every
    stated relation must hold geometrically.

    `exhaustive` reads a caption the way the world's own captions are written: it names every
    object in the image, and an unnamed size means the medium class. Under it, "a red circle"
    is false of an image of a small red circle, or of a red circle and a blue star."""
    placed = layout.objects
    if exhaustive and len(spec.objects) != len(placed):
        return False
    candidates = [[j for j, p in enumerate(placed) if _matches(o, p.obj, exhaustive)]
                  for o in spec.objects]
    for assignment in itertools.product(*candidates):
        if len(set(assignment)) != len(assignment):
            continue
        if all(holds(r.relation, _centre(placed[assignment[r.subject]]),
                     _centre(placed[assignment[r.object]]), layout.size) for r in spec.relations):
            return True
    return False


def _matches(spec: Obj, actual: Obj, exhaustive: bool = False) -> bool:
    return spec.shape == actual.shape and spec.colour == actual.colour and \
        (spec.size == actual.size or (spec.size is None and not exhaustive))


def _centre(p: Placed) -> tuple[float, float]:
    return (p.cx, p.cy)


def layout_scene(layout: Layout) -> Scene:
    """The full scene an image shows: its objects and every relation that holds between them."""
    from compclip.datagen.world.scene import Rel
    rels = tuple(Rel(i, rel, j) for i, rel, j in sorted(relations_between(layout)))
    return Scene(tuple(p.obj for p in layout.objects), rels)


def union_box(layout: Layout, pad: float = 2.0) -> tuple[int, int, int, int]:
    """(x, y, w, h) of the box holding every object, padded and clipped to the image."""
    x0 = max(0, math.floor(min(p.cx - p.r for p in layout.objects) - pad))
    y0 = max(0, math.floor(min(p.cy - p.r for p in layout.objects) - pad))
    x1 = min(layout.size, math.ceil(max(p.cx + p.r for p in layout.objects) + pad))
    y1 = min(layout.size, math.ceil(max(p.cy + p.r for p in layout.objects) + pad))
    return (x0, y0, x1 - x0, y1 - y0)


def mirrored(layout: Layout) -> Layout:
    """The left-right mirror image of a layout (rotations mirrored too)."""
    return Layout(layout.size, tuple(
        Placed(p.obj, layout.size - p.cx, p.cy, p.r, -p.angle, p.rgb) for p in layout.objects))


