"""Train / benchmark splits with held-out compositions, stored as `split.json`.

Held out are (a) colour-shape bindings, one per colour and one per shape (e.g. "red star"), and
(b) relation triples between two shapes (e.g. "star left of triangle", which is also "triangle
right of star"). Training never shows a held-out composition anywhere: not in an image (objects
and every relation that holds geometrically between any two objects, in the image and in its
mirror image), not in a caption, negative or partner. Benchmark scenes each contain at least one
held-out composition, so they test composition, not memory of seen combinations.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from compclip.datagen.world.layout import Layout, mirrored, relations_between
from compclip.datagen.world.scene import Obj, Rel, Scene, random_scene
from compclip.datagen.world.vocab import COLOURS, SHAPES

SPLIT_FILE = "split.json"


@dataclass(frozen=True)
class Split:
    bindings: frozenset[tuple[str, str]]  # (colour, shape)
    relations: frozenset[tuple[str, str, str]]  # (shape, "left" | "above", shape)

    @classmethod
    def make(cls, seed: int, n_relations: int = 4) -> "Split":
        rng = random.Random(f"world-split:{seed}")
        shapes = list(SHAPES)
        rng.shuffle(shapes)
        bindings = frozenset(zip(COLOURS, shapes))  # a matching: each colour and shape once
        triples = [(a, rel, b) for a in SHAPES for b in SHAPES if a != b for rel in ("left", "above")]
        rng.shuffle(triples)
        return cls(bindings, choose_relations(triples, n_relations))

    # ------------------------------------------------------------------ held-out facts
    def spec_heldout(self, scene: Scene) -> set[tuple]:
        """Held-out compositions a caption scene states."""
        facts = {o.binding for o in scene.objects} & self.bindings
        return facts | (scene.relation_triples() & self.relations)

    def image_heldout(self, layout: Layout) -> set[tuple]:
        """Held-out compositions an image shows, in itself or in its mirror image."""
        facts = {p.obj.binding for p in layout.objects} & self.bindings
        for lay in (layout, mirrored(layout)):
            for i, rel, j in relations_between(lay):
                if rel in ("left", "above"):
                    t = (lay.objects[i].obj.shape, rel, lay.objects[j].obj.shape)
                    if t in self.relations:
                        facts.add(t)
        return facts

    def train_ok(self, scene: Scene) -> bool:
        return not self.spec_heldout(scene)

    # ------------------------------------------------------------------ sampling
    def heldout_scene(self, rng: random.Random, need: str = "any", **kwargs) -> Scene:
        """A random scene stating at least one held-out composition of the kind `need`
        ("binding", "relation" or "any"); `kwargs` go to `random_scene`."""
        for _ in range(100_000):
            if need == "relation":  # built around a held-out triple, so sampling stays fast
                scene = _around(rng.choice(sorted(self.relations)), random_scene(rng, **kwargs), rng)
            else:
                scene = random_scene(rng, **kwargs)
            facts = self.spec_heldout(scene) if scene else set()
            if need == "binding":
                facts = facts & self.bindings
            if facts:
                return scene
        raise RuntimeError(f"no held-out scene of kind '{need}' found")

    # ------------------------------------------------------------------ storage
    def to_json(self) -> dict:
        return {"heldout_bindings": sorted(list(b) for b in self.bindings),
                "heldout_relations": sorted(list(t) for t in self.relations),
                "rule": "training never shows a held-out binding or relation triple in any image "
                        "(or its mirror image), caption, negative or partner; every benchmark "
                        "item's positive states at least one held-out composition. A relation "
                        "triple [a, left, b] also covers 'b right of a'."}

    def save(self, out_dir: str | Path, **extra) -> Path:
        path = Path(out_dir) / SPLIT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**extra, **self.to_json()}, indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Split":
        path = Path(path)
        data = json.loads((path / SPLIT_FILE if path.is_dir() else path).read_text())
        return cls(frozenset(tuple(b) for b in data["heldout_bindings"]),
                   frozenset(tuple(t) for t in data["heldout_relations"]))


def choose_relations(triples: list[tuple[str, str, str]], n: int) -> frozenset[tuple[str, str, str]]:
    """The first `n` of the (shuffled) `triples`, never both orders of one pair, with each axis
    ("left", "above") at least once: VG-Relation states both."""
    chosen: list[tuple[str, str, str]] = []
    for t in triples:
        if (t[2], t[1], t[0]) not in chosen and len(chosen) < n:
            chosen.append(t)
    for kind in ("left", "above"):
        if not any(t[1] == kind for t in chosen):
            chosen[-1] = next(t for t in triples if t[1] == kind)
    return frozenset(chosen)


def _around(triple: tuple[str, str, str], scene: Scene, rng: random.Random) -> Scene | None:
    """`scene` with its first two objects reshaped and related as `triple` (stated either way
    round); further relations move to the other axis, so the scene always fits. None if the
    scene has no relation or the new shapes would repeat a binding."""
    a, rel, b = triple
    if not scene.relations:
        return None
    objs = list(scene.objects)
    objs[0], objs[1] = Obj(a, objs[0].colour, objs[0].size), Obj(b, objs[1].colour, objs[1].size)
    if len({o.binding for o in objs}) < len(objs):
        return None
    first = Rel(1, {"left": "right", "above": "below"}[rel], 0) if rng.random() < 0.5 else Rel(0, rel, 1)
    other_axis = ("above", "below") if rel == "left" else ("left", "right")
    rest = tuple(Rel(r.subject, rng.choice(other_axis), r.object) for r in scene.relations[1:])
    return Scene(tuple(objs), (first,) + rest)
