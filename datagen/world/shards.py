"""Training shard sets of the world, written with `ShardSetWriter` in the shard schema.

Sample `i` is made from its own seed (`world-train:<seed>:<i>`) alone, and the samples are
written in a seeded global order (`compclip.shardset.order.permutation(n, seed)`: position p holds sample
`perm[p]`, key and `image_id` keep `i`), so a resumed writer that skips `inputs_done`
positions produces a byte-identical set. A sample is a training-split scene
(never a held-out composition, see splits.py), its rendered JPEG and caption, optionally hard
negatives (edits.py; kind/subkind labelled, true by construction) and a partner:
`generated` renders one negative caption's scene (`negative_index` points at it; the positive
caption is false of that image, read exhaustively as the world's captions are written), `mirrored` is the image flipped left-right with the caption of
the mirrored scene (those sets draw scenes with a left/right relation, so the caption changes).
A mirrored partner's caption keeps the anchor's argument order (`mirrored_order` "same": the two
captions differ in the relation word), or draws it with a fair coin ("drawn", as the stitched
pairs of datagen/images/stitch.py draw each caption's phrasing: about half the pairs then differ in
argument order only, "A left of B" / "B left of A", the contrast ARO's VG-Relation scores).

`leftright_fraction` (a set without partners, e.g. the pretraining set DIR/train) fixes how many
captions state a left/right relation: exactly `round(fraction * n)` samples, chosen by the seed,
are scenes whose first relation is left/right (their caption states it, true from the viewer's
side, as every world caption is), and every other sample states no left/right relation (above /
below or none). Without it (None) about half the captions state one, as the world always did.

`object_pool` (K) draws every scene's objects from K training bindings (colour, shape) chosen by
the seed (`object_pool_bindings`), so that scenes of the same objects, in either arrangement, meet
in ordinary batches; negatives and generated partners may still name other objects. With
`pool_per_shard` each block of `shard_size` positions in write order (a shard, where no sample is
skipped) draws its own K bindings, seeded by the block's number: a shard holds K bindings and
the set more, so read shard by shard the pool changes over training.

`object_couples` pairs the training bindings into fixed couples, chosen by the seed
(`object_couple_bindings`), and sample `i`'s scene shows couple `i mod` their number (two objects):
every binding appears, yet only as many pairs of objects as a pool of six holds, so a scene and
its mirror image still meet in ordinary batches.

`fixed_order` words every caption whose first clause states a left/right relation with its two
objects in one fixed order (`fixed_order_style`: by colour, shape, size), so that a scene and its
mirror image are captioned "A left of B" / "A right of B": the relation word alone tells them
apart. Without it each caption's argument order is drawn with its style ("A left of B" or
"B right of A"), as the world always did.
"""
from __future__ import annotations

import random
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional, Sequence

from PIL import ImageOps

from compclip.shardset.order import permutation, shuffled_order
from compclip.shardset.schema import Negative, Partner, ShardSample
from compclip.shardset.shards import ShardSetWriter, read_manifest
from compclip.datagen.world.edits import mirror_scene, negatives as make_negatives
from compclip.datagen.world.grammar import Style, describe, first_relation, random_style
from compclip.datagen.world.layout import Layout, PlacementError, place, satisfies
from compclip.datagen.world.render import draw_layout, encode
from compclip.datagen.world.scene import Scene, random_scene
from compclip.datagen.world.splits import Split
from compclip.datagen.world.vocab import COLOURS, SHAPES

SOURCE = "world"
PARTNERS = ("generated", "mirrored")
MIRRORED_ORDERS = ("same", "drawn")


def scene_json(scene: Scene) -> dict:
    return {"objects": [asdict(o) for o in scene.objects],
            "relations": [asdict(r) for r in scene.relations]}


def layout_json(layout: Layout) -> list[dict]:
    return [{"cx": round(p.cx, 2), "cy": round(p.cy, 2), "r": round(p.r, 2)} for p in layout.objects]


def states_leftright(scene: Scene) -> bool:
    """Does the scene (and so its caption) state a left/right relation?"""
    return any(r.relation in ("left", "right") for r in scene.relations)


MAX_SCENE_TRIES = 100_000


def object_pool_bindings(seed: int, k: int, split: Split,
                         shard: Optional[int] = None) -> tuple[tuple[str, str], ...]:
    """The `k` (colour, shape) bindings a world of `seed` draws its training scenes from with
    `object_pool`: chosen by the seed (and `shard`'s number with `pool_per_shard`) among the
    bindings the split does not hold out."""
    allowed = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in split.bindings]
    if not 3 <= k <= len(allowed):
        raise ValueError(f"object_pool {k}: between 3 (a scene has up to 3 objects) and "
                         f"{len(allowed)} (the bindings training may show)")
    tag = f"world-pool:{seed}" if shard is None else f"world-pool:{seed}:shard-{shard}"
    return tuple(random.Random(tag).sample(allowed, k))


def object_couple_bindings(seed: int, split: Split) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The bindings training may show, paired into couples by the seed (`object_couples`); no
    couple's two shapes form a held-out left/right triple, which no side-by-side image could avoid
    showing in itself or in its mirror image."""
    allowed = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in split.bindings]
    held = {(a, b) for a, rel, b in split.relations if rel == "left"}
    rng = random.Random(f"world-couples:{seed}")
    for _ in range(MAX_SCENE_TRIES):
        rng.shuffle(allowed)
        couples = tuple(tuple(allowed[k:k + 2]) for k in range(0, len(allowed) - 1, 2))
        if not any((a[1], b[1]) in held or (b[1], a[1]) in held for a, b in couples):
            return couples
    raise ValueError(f"no pairing of the training bindings avoids the held-out relations {sorted(held)}")


def train_scene(rng: random.Random, split: Split, size: int, horizontal: bool = False,
                no_leftright: bool = False,
                bindings: Optional[Sequence[tuple[str, str]]] = None) -> tuple[Scene, Layout]:
    """A training scene and layout with no held-out composition in caption, image or mirror;
    `horizontal`: its first relation is left/right; `no_leftright`: it states no left/right;
    `bindings`: the objects it may hold (None: any)."""
    for _ in range(MAX_SCENE_TRIES):
        n = 3 if rng.random() < 0.2 else 2
        if bindings is not None:
            n = min(n, len(bindings))  # a couple: two objects
        scene = random_scene(rng, n_objects=n, related=horizontal or rng.random() < 0.85,
                             bindings=bindings)
        if horizontal and scene.relations[0].relation not in ("left", "right"):
            continue
        if no_leftright and states_leftright(scene):
            continue
        if not split.train_ok(scene) or (horizontal and not split.train_ok(mirror_scene(scene))):
            continue
        layout = place(scene, size, rng)
        if not split.image_heldout(layout):
            return scene, layout
    objects = f"the objects {list(bindings)}" if bindings else "any objects"
    raise ValueError(f"no training scene in {MAX_SCENE_TRIES} tries from {objects} "
                     f"(horizontal={horizontal}): every one states or shows a held-out composition")


def fixed_order_style(scene: Scene, style: Style) -> Style:
    """`style` with the argument order that names first the object of the first clause's
    left/right relation that sorts first by (colour, shape, size); other scenes keep `style`."""
    rel = first_relation(scene)
    if rel is None or rel.relation not in ("left", "right"):
        return style
    subject, obj = (scene.objects[k] for k in (rel.subject, rel.object))
    order = (lambda o: (o.colour, o.shape, o.size or ""))
    return replace(style, inverse=order(obj) < order(subject))


def make_sample(i: int, seed: int, split: Split, size: int = 64, with_negatives: bool = False,
                partner: Optional[str] = None, leftright: Optional[bool] = None,
                bindings: Optional[Sequence[tuple[str, str]]] = None, fixed_order: bool = False,
                mirrored_order: str = "same") -> ShardSample:
    """Training sample `i`, from its own seed alone. `leftright`: True, a scene that states a
    left/right relation; False, one that states none; None, either (the world's own mix).
    `bindings`: the objects its scene may hold (None: any); `fixed_order`: its caption names a
    left/right relation's objects in the fixed order (`fixed_order_style`); `mirrored_order`: a
    mirrored partner's caption keeps the anchor's argument order ("same") or draws it ("drawn")."""
    rng = random.Random(f"world-train:{seed}:{i}")
    scene, layout = train_scene(rng, split, size, horizontal=partner == "mirrored" or leftright is True,
                                no_leftright=leftright is False, bindings=bindings)
    image = draw_layout(layout, rng)
    style = random_style(rng)
    if fixed_order:
        style = fixed_order_style(scene, style)
    caption = describe(scene, style)
    meta = {"source": SOURCE, "image_id": f"{seed}-{i}", "split": "train", "seed": seed,
            "scene": scene_json(scene), "layout": layout_json(layout), "style": asdict(style)}
    edited = []
    if with_negatives or partner == "generated":
        edited = make_negatives(scene, layout, style, rng, allowed=split.train_ok)
    negs = [Negative(e.text, e.kind, e.subkind, SOURCE) for e in edited]
    part = None
    if partner == "generated":
        part = _generated_partner(scene, edited, split, size, rng)
    elif partner == "mirrored":
        if mirrored_order not in MIRRORED_ORDERS:
            raise ValueError(f"unknown mirrored_order '{mirrored_order}' (one of {MIRRORED_ORDERS})")
        mirror_style = style if mirrored_order == "same" else replace(style, inverse=rng.random() < 0.5)
        part = Partner(encode(ImageOps.mirror(image)), describe(mirror_scene(scene), mirror_style), "mirrored")
    elif partner is not None:
        raise ValueError(f"unknown partner kind '{partner}' (one of {PARTNERS})")
    return ShardSample(key=f"{i:08d}", caption=caption, image=encode(image), meta=meta,
                       negatives=negs, partner=part)


def _generated_partner(scene: Scene, edited: list, split: Split, size: int,
                       rng: random.Random) -> Optional[Partner]:
    """Render a negative caption's scene whose image the positive caption does not describe."""
    order = list(range(len(edited)))
    rng.shuffle(order)
    for k in order:
        for _ in range(5):
            try:
                layout = place(edited[k].scene, size, rng, max_tries=500)
            except PlacementError:  # e.g. a replaced relation that cannot fit: try another
                break
            if not satisfies(layout, scene, exhaustive=True) and not split.image_heldout(layout):
                return Partner(encode(draw_layout(layout, rng)), edited[k].text, "generated",
                               negative_index=k)
    return None


def leftright_samples(n: int, seed: int, fraction: float) -> set[int]:
    """The `round(fraction * n)` sample indices of a set that state a left/right relation."""
    return set(random.Random(f"world-leftright:{seed}").sample(range(n), round(fraction * n)))


def write_train_set(out_dir: str | Path, n: int, seed: int, split: Split, size: int = 64,
                    with_negatives: bool = False, partner: Optional[str] = None,
                    shard_size: int = 1000, progress: bool = True,
                    leftright_fraction: Optional[float] = None, object_pool: Optional[int] = None,
                    fixed_order: bool = False, pool_per_shard: bool = False,
                    mirrored_order: str = "same", object_couples: bool = False) -> dict:
    """Write (or resume) a training shard set of `n` samples; returns the manifest."""
    out_dir = Path(out_dir)
    features = {"negatives": bool(with_negatives or partner == "generated"),
                "partner": partner, "source": SOURCE, "seed": seed, "size": size, "samples": n}
    lr_set: Optional[set[int]] = None
    if leftright_fraction is not None:
        if partner is not None or not 0 <= leftright_fraction <= 1:
            raise ValueError(f"leftright_fraction {leftright_fraction}: a number in [0, 1], "
                             f"for a set without partners (not '{partner}')")
        features["leftright_fraction"] = leftright_fraction
        lr_set = leftright_samples(n, seed, leftright_fraction)
    pools: list = [None]  # the bindings of each shard's scenes (one entry: the same for all)
    if pool_per_shard:
        if object_pool is None:
            raise ValueError("pool_per_shard needs object_pool (the number of bindings per shard)")
        pools = [object_pool_bindings(seed, object_pool, split, shard)
                 for shard in range(-(-n // shard_size))]
        features["object_pool"] = [[list(b) for b in pool] for pool in pools]
        features["pool_per_shard"] = True
    elif object_pool is not None:
        pools = [object_pool_bindings(seed, object_pool, split)]
        features["object_pool"] = [list(b) for b in pools[0]]
    couples = object_couple_bindings(seed, split) if object_couples else ()
    if couples:
        if object_pool is not None:
            raise ValueError("object_couples and object_pool: give one (each says which objects a scene holds)")
        features["object_couples"] = [[list(b) for b in c] for c in couples]
    if fixed_order:
        features["fixed_order"] = True
    if mirrored_order != "same" and partner == "mirrored":
        features["mirrored_order"] = mirrored_order
    if (out_dir / "manifest.json").is_file():
        manifest = read_manifest(out_dir)
        if manifest.get("complete") and manifest.get("features") == features \
                and manifest.get("order") == shuffled_order(seed):
            return manifest
    writer = ShardSetWriter(out_dir, max_count=shard_size, features=features,
                            order=shuffled_order(seed))
    start, t0 = writer.inputs_done, time.time()
    perm = permutation(n, seed)
    with writer:
        for position in range(start, n):
            i = int(perm[position])
            bindings = pools[position // shard_size] if pool_per_shard else pools[0]
            if couples:
                bindings = couples[i % len(couples)]
            sample = make_sample(i, seed, split, size, with_negatives, partner,
                                 None if lr_set is None else i in lr_set, bindings, fixed_order,
                                 mirrored_order)
            if partner and sample.partner is None:
                writer.skip("no renderable partner")
            else:
                writer.add(sample)
            if progress and ((position + 1) % 250 == 0 or position + 1 == n):
                rate = (position + 1 - start) / max(1e-6, time.time() - t0)
                print(f"\r  {out_dir.name}: {position + 1}/{n} samples ({rate:.0f}/s)", end="",
                      file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return read_manifest(out_dir)
