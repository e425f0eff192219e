"""Benchmark sets from held-out scenes, in the real benchmarks' on-disk formats.

Layout under `<out>/benchmarks` (docs/benchmark_data.md; field by field in docs/world.md):

    visla/Generic_VISLA.tsv  visla/Spatial_VISLA.tsv  visla/images/
    sugarcrepe/{add_att,add_obj,replace_att,replace_obj,replace_rel,swap_att,swap_obj}.json  + images/
    sugarcrepe_pp/{replace_att,replace_obj,replace_rel,swap_att,swap_obj}.json  + images/
    bivlc/                       datasets.Dataset.save_to_disk (image, caption, negative_caption,
                                 negative_image, type, subtype)
    aro/visual_genome_relation.json  aro/visual_genome_attribution.json  aro/images/
    aro/coco_karpathy_test.json  aro/coco_images/val2014/
    aro/flickr30k_test.json      aro/flickr30k_images/flickr30k-images/

Every positive states at least one held-out composition (splits.py); every negative caption is
false of its image (edits.py) and no BiVLC negative image is described by the positive caption
(read exhaustively, as the world's captions are written: see layout.satisfies). Each benchmark draws from its own seeded generator, so all are deterministic for a seed.
"""
from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from compclip.datagen.world.edits import Edited, negatives
from compclip.datagen.world.grammar import Style, describe, paraphrase_style, random_style
from compclip.datagen.world.layout import Layout, place, satisfies, union_box
from compclip.datagen.world.render import draw_layout, encode
from compclip.datagen.world.scene import Obj, Rel, Scene, random_scene
from compclip.datagen.world.splits import Split
from compclip.datagen.world.vocab import COLOURS, INVERSE, RELATION_PHRASES, SHAPES

VISLA_GENERIC_HEADER = ["filename", "caption", "second positive", "negative_caption"]
VISLA_SPATIAL_HEADER = ["image", "sent1", "sent2", "Best reference (Semantically close)",
                        "Reference-2 (Completely irrelevant)"]
SUGARCREPE_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel",
                      "swap_att", "swap_obj")
SUGARCREPE_PP_SUBSETS = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
BIVLC_COLUMNS = ("image", "caption", "negative_caption", "negative_image", "type", "subtype")
VG_RELATION_NAMES = {rel: phrases[0] for rel, phrases in RELATION_PHRASES.items()}


@dataclass
class BenchSizes:
    """Items per benchmark file (the defaults suit a CPU demo; see docs/world.md)."""
    visla_generic: int = 200
    visla_spatial: int = 200
    sugarcrepe: int = 100  # per subset
    sugarcrepe_pp: int = 100  # per subset
    bivlc: int = 200
    vg_relation: int = 1000  # 250 per relation: 500 left/right items for `left_right/acc`
    vg_attribution: int = 200  # in groups of 25 per attribute pair (ARO drops smaller groups)
    order_images: int = 100  # 5 captions each

    def scaled(self, factor: float) -> "BenchSizes":
        sizes = {k: max(1, round(v * factor)) for k, v in self.__dict__.items()}
        # whole groups of 25, at least one: ARO's filter would drop a smaller group entirely
        sizes["vg_attribution"] = 25 * max(1, round(sizes["vg_attribution"] / 25))
        return BenchSizes(**sizes)


@dataclass
class Item:
    scene: Scene
    layout: Layout
    style: Style
    caption: str
    negative: Optional[Edited] = None
    image: object = field(default=None, repr=False)


def _need(subkind: str) -> str:
    return {"rel": "relation", "att": "binding", "obj": "binding"}.get(subkind, "any")


class _Builder:
    """Shared machinery: held-out scenes, their images and one negative of a requested kind."""

    def __init__(self, root: Path, split: Split, seed: int, size: int, progress: bool):
        self.root, self.split, self.seed, self.size, self.progress = root, split, seed, size, progress
        self.counts: dict[str, int] = {}

    def rng(self, name: str) -> random.Random:
        return random.Random(f"world-bench:{self.seed}:{name}")

    def item(self, rng: random.Random, kind: str, subkind: str, need: Optional[str] = None,
             **scene_kwargs) -> Item:
        """A held-out scene with a negative of (kind, subkind) that is false of its image."""
        scene_kwargs.setdefault("n_objects", 2)
        for _ in range(1000):
            scene = self.split.heldout_scene(rng, need or _need(subkind), **scene_kwargs)
            if subkind == "rel" and not scene.relations:
                continue
            layout = place(scene, self.size, rng)
            style = random_style(rng)
            found = negatives(scene, layout, style, rng, kinds=((kind, subkind),))
            if found:
                return Item(scene, layout, style, describe(scene, style), found[0],
                            draw_layout(layout, rng))
        raise RuntimeError(f"no held-out scene takes a ({kind}, {subkind}) negative")

    def save(self, image, folder: Path, name: str) -> str:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(encode(image, "jpg"))
        return name

    def done(self, name: str, n: int) -> None:
        self.counts[name] = n
        if self.progress:
            print(f"  benchmarks/{name}: {n}", file=sys.stderr, flush=True)


def _paraphrase(item: Item, rng: random.Random) -> str:
    """A different wording of the item's own scene."""
    for _ in range(20):
        text = describe(item.scene, paraphrase_style(item.style, rng))
        if text.lower().rstrip(".") != item.caption.lower().rstrip("."):
            return text
    raise RuntimeError(f"no paraphrase of {item.caption!r}")


def _write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    """Tab-separated, CRLF line ends, no trailing newline: as the real VISLA files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(header)] + ["\t".join(r) for r in rows]
    path.write_bytes("\r\n".join(lines).encode("utf-8"))


# ------------------------------------------------------------------------------------- VISLA

def write_visla(b: _Builder, n_generic: int, n_spatial: int) -> None:
    images = b.root / "visla" / "images"
    rng = b.rng("visla-generic")
    kinds = [("swap", "att"), ("replace", "att"), ("replace", "obj"), ("swap", "obj")]
    rows = []
    for i in range(n_generic):
        item = b.item(rng, *kinds[i % len(kinds)])
        name = b.save(item.image, images, f"{i + 1:012d}.jpg")
        rows.append([name, item.caption, _paraphrase(item, rng), item.negative.text])
    _write_tsv(b.root / "visla" / "Generic_VISLA.tsv", VISLA_GENERIC_HEADER, rows)
    b.done("visla/Generic_VISLA.tsv", len(rows))

    rng = b.rng("visla-spatial")
    rows = []
    for i in range(n_spatial):
        item = b.item(rng, *[("replace", "rel"), ("swap", "rel")][i % 2])
        name = b.save(item.image, images, f"{n_generic + i + 1:012d}.jpg")
        irrelevant = describe(_other_scene(rng, item.scene), item.style)
        rows.append([name, item.caption, _paraphrase(item, rng), item.negative.text, irrelevant])
    _write_tsv(b.root / "visla" / "Spatial_VISLA.tsv", VISLA_SPATIAL_HEADER, rows)
    b.done("visla/Spatial_VISLA.tsv", len(rows))


def _other_scene(rng: random.Random, scene: Scene) -> Scene:
    """A related scene sharing no colour-shape binding with `scene` (completely irrelevant)."""
    used = {o.binding for o in scene.objects}
    while True:
        other = random_scene(rng, 2)
        if not used & {o.binding for o in other.objects}:
            return other


# -------------------------------------------------------------------------------- SugarCrepe

def write_sugarcrepe(b: _Builder, n: int, n_pp: int) -> None:
    for subset in SUGARCREPE_SUBSETS:
        kind, subkind = subset.split("_")
        rng = b.rng(f"sugarcrepe-{subset}")
        data = {}
        for i in range(n):
            item = b.item(rng, kind, subkind, need="any" if kind == "add" else None)
            name = b.save(item.image, b.root / "sugarcrepe" / "images", f"{subset}_{i:06d}.jpg")
            data[str(i)] = {"filename": name, "caption": item.caption,
                            "negative_caption": item.negative.text}
        path = b.root / "sugarcrepe" / f"{subset}.json"
        path.write_text(json.dumps(data, indent=4), encoding="utf-8")
        b.done(f"sugarcrepe/{subset}.json", len(data))
    for subset in SUGARCREPE_PP_SUBSETS:
        kind, subkind = subset.split("_")
        rng = b.rng(f"sugarcrepe_pp-{subset}")
        data = []
        for i in range(n_pp):
            item = b.item(rng, kind, subkind)
            name = b.save(item.image, b.root / "sugarcrepe_pp" / "images", f"{subset}_{i:06d}.jpg")
            data.append({"id": i, "filename": name, "caption": item.caption,
                         "caption2": _paraphrase(item, rng), "negative_caption": item.negative.text})
        path = b.root / "sugarcrepe_pp" / f"{subset}.json"
        path.write_text(json.dumps(data, indent=1, separators=(",", ":")), encoding="utf-8")
        b.done(f"sugarcrepe_pp/{subset}.json", len(data))


# ------------------------------------------------------------------------------------- BiVLC

def write_bivlc(b: _Builder, n: int) -> None:
    """Instances (I0, C0, C1, I1): I1 is rendered from C1, and C0 is false of I1."""
    import datasets
    rng = b.rng("bivlc")
    kinds = [tuple(s.split("_")) for s in SUGARCREPE_SUBSETS]
    rows = {c: [] for c in BIVLC_COLUMNS}
    for _ in range(100 * n + 100):
        if len(rows["caption"]) >= n:
            break
        kind, subkind = kinds[len(rows["caption"]) % len(kinds)]
        item = b.item(rng, kind, subkind, need="any" if kind == "add" else None)
        neg_layout = place(item.negative.scene, b.size, rng)
        # C0 must be false of I1 as the world's captions read (exhaustive: an added object or
        # a named size makes I1 a different scene); a chance match of a relation is redrawn
        if satisfies(neg_layout, item.scene, exhaustive=True):
            continue
        for column, value in zip(BIVLC_COLUMNS, (item.image, item.caption, item.negative.text,
                                                 draw_layout(neg_layout, rng), kind, subkind)):
            rows[column].append(value)
    else:
        raise RuntimeError(f"BiVLC: only {len(rows['caption'])} of {n} instances found")
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string"),
                                  "negative_caption": datasets.Value("string"),
                                  "negative_image": datasets.Image(),
                                  "type": datasets.Value("string"), "subtype": datasets.Value("string")})
    ds = datasets.Dataset.from_dict(rows, features=features, split=datasets.Split.TEST)
    bars = datasets.utils.logging.is_progress_bar_enabled()
    if not b.progress:
        datasets.disable_progress_bars()
    try:
        ds.save_to_disk(str(b.root / "bivlc"))
    finally:
        if bars:
            datasets.enable_progress_bars()
    b.done("bivlc", len(ds))


# --------------------------------------------------------------------------------------- ARO

def write_aro(b: _Builder, n_relation: int, n_attribution: int, n_order: int) -> None:
    aro, images = b.root / "aro", b.root / "aro" / "images"
    the = Style("copula", definite=True)

    rng = b.rng("vg-relation")
    items = []
    relations = list(VG_RELATION_NAMES)
    held = {t[1] for t in b.split.relations}
    missing = sorted(r for r in relations[:n_relation] if r not in held and INVERSE[r] not in held)
    if missing:
        raise ValueError(f"the split holds out no relation triple stated as {missing}, so no VG-Relation "
                         f"item can state it; held out: {sorted(b.split.relations)}")
    for i in range(n_relation):
        rel = relations[i % len(relations)]
        while True:  # a held-out relation triple, stated as `rel`
            scene = b.split.heldout_scene(rng, "relation", n_objects=2)
            r = scene.relations[0]
            if r.relation != rel:
                if INVERSE[r.relation] != rel:
                    continue
                scene = Scene(scene.objects, (Rel(r.object, rel, r.subject),))
            break
        layout = place(scene, b.size, rng)
        r = scene.relations[0]
        a, o = scene.objects[r.subject], scene.objects[r.object]
        name = b.save(draw_layout(layout, rng), images, f"vgr_{i:06d}.jpg")
        x, y, w, h = union_box(layout)
        true, false = Scene((a, o), (Rel(0, rel, 1),)), Scene((o, a), (Rel(0, rel, 1),))
        items.append({"image_id": f"vgr_{i:06d}", "relation_name": VG_RELATION_NAMES[rel],
                      "image_path": name, "bbox_x": x, "bbox_y": y, "bbox_w": w, "bbox_h": h,
                      "true_caption": describe(true, the), "false_caption": describe(false, the),
                      "obj1_name": a.phrase(), "obj2_name": o.phrase()})
    (aro / "visual_genome_relation.json").write_text(json.dumps(items, indent=1))
    b.done("aro/visual_genome_relation.json", len(items))

    rng = b.rng("vg-attribution")
    colour_pairs = [(c1, c2) for c1 in COLOURS for c2 in COLOURS if c1 != c2]
    rng.shuffle(colour_pairs)
    groups = min(len(colour_pairs), max(1, n_attribution // 25))  # every group keeps >= 25 items
    heldout_shape = dict(b.split.bindings)
    items = []
    for i in range(n_attribution):
        c1, c2 = colour_pairs[i % groups]
        while True:  # at least one held-out binding; two different shapes
            s1, s2 = rng.choice(SHAPES), rng.choice(SHAPES)
            if rng.random() < 0.5:
                s1 = heldout_shape[c1]
            else:
                s2 = heldout_shape[c2]
            if s1 != s2:
                break
        scene = Scene((Obj(s1, c1), Obj(s2, c2)))
        layout = place(scene, b.size, rng)
        name = b.save(draw_layout(layout, rng), images, f"vga_{i:06d}.jpg")
        x, y, w, h = union_box(layout)
        false = Scene((Obj(s1, c2), Obj(s2, c1)))
        items.append({"image_id": f"vga_{i:06d}", "attributes": [c1, c2], "image_path": name,
                      "bbox_x": x, "bbox_y": y, "bbox_w": w, "bbox_h": h,
                      "true_caption": describe(scene, the), "false_caption": describe(false, the),
                      "obj1_name": s1, "obj2_name": s2})
    (aro / "visual_genome_attribution.json").write_text(json.dumps(items, indent=1))
    b.done("aro/visual_genome_attribution.json", len(items))

    rng = b.rng("order")
    coco, flickr = [], []
    for i in range(n_order):
        scene = b.split.heldout_scene(rng, "any", n_objects=2 + (i % 3 == 0))
        layout = place(scene, b.size, rng)
        image = draw_layout(layout, rng)
        captions: list[str] = []
        while len(captions) < 5:
            text = describe(scene, replace(random_style(rng), capital=True, period=True))
            if text not in captions:
                captions.append(text)
        b.save(image, aro / "coco_images" / "val2014", f"world_{i:06d}.jpg")
        b.save(image, aro / "flickr30k_images" / "flickr30k-images", f"{i:010d}.jpg")
        coco.append({"image": f"val2014/world_{i:06d}.jpg", "caption": captions})
        flickr.append({"image": f"flickr30k-images/{i:010d}.jpg", "caption": captions})
    (aro / "coco_karpathy_test.json").write_text(json.dumps(coco))
    (aro / "flickr30k_test.json").write_text(json.dumps(flickr))
    b.done("aro/coco_karpathy_test.json", len(coco))
    b.done("aro/flickr30k_test.json", len(flickr))


def write_benchmarks(root: str | Path, split: Split, seed: int, size: int = 64,
                     sizes: BenchSizes = BenchSizes(), progress: bool = True) -> dict[str, int]:
    """Write every benchmark under `root` (e.g. <out>/benchmarks); returns items per file."""
    b = _Builder(Path(root), split, seed, size, progress)
    b.root.mkdir(parents=True, exist_ok=True)
    write_visla(b, sizes.visla_generic, sizes.visla_spatial)
    write_sugarcrepe(b, sizes.sugarcrepe, sizes.sugarcrepe_pp)
    write_bivlc(b, sizes.bivlc)
    write_aro(b, sizes.vg_relation, sizes.vg_attribution, sizes.order_images)
    (b.root / "world_benchmarks.json").write_text(json.dumps(
        {"seed": seed, "size": size, "counts": b.counts, "split": split.to_json()}, indent=1))
    return b.counts
