"""Left-right (and above-below) stitched pairs: two objects, both arrangements, one sample.

An object bank is a folder of object images: RGBA crops (the synthetic world's
`write_object_bank` output, e.g. `red_circle.png`), plain photos or crops, or images generated
from noun prompts (`datagen.images.genimages.write_generated_object_bank`). The object's name is the
file stem with underscores as spaces and a trailing `_<number>` dropped (`dog_3.jpg` -> "dog").
Backgrounds come from `<bank>/backgrounds/` (or any folder given); without any, a flat random
colour is used. Unreadable images are skipped and counted. A bank cut from COCO images
(`prepare cocobank`) has `coco_ids.json` (file name -> COCO image id): each pair then records the
COCO images its two objects came from in `json` as `coco_ids` (sorted, distinct), which the shard
writer lists in `image_ids.txt` for the trainer's benchmark-overlap guard.

Pair `i` (seeded by `(seed, i)` alone, so resumed runs are byte-identical):
1. pick a relation axis (left-right or above-below) and two objects with different names, A and B;
2. resize each to a random fraction of the canvas (shrunk together if both do not fit in a row);
3. place A leaving room for B, then B strictly beyond A along the axis (a gap of `gap` pixels
   between their boxes), each at a random position on the other axis;
4. render the anchor (A left of / above B) and its mirror (positions reflected along the axis,
   objects themselves not flipped: B left of / above A) on the same background;
5. caption each with either phrasing, a fair coin each: "A to the left of B" or "B to the right
   of A" ("A above B" or "B below A").
The sample's partner (kind "mirrored") is the mirrored arrangement; `json` records the relation,
object names and each object's pixel box (from its alpha mask) in both images, and `image_id`
(= the key). Pairs are written in a seeded global order (`compclip.shardset.order.permutation(n_pairs,
seed)`; key `<prefix><i>` keeps the pair index).
"""
from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from PIL import Image, ImageOps

from compclip.shardset.imageio import BadImage, encode_image, list_image_files, load_image_file
from compclip.shardset.order import permutation, shuffled_order
from compclip.shardset.schema import Partner, ShardSample
from compclip.shardset.shards import ShardSetWriter

log = logging.getLogger(__name__)

RELATIONS = ("left", "above")  # axis x, axis y
PHRASES = {"left": ("to the left of", "to the right of"), "above": ("above", "below")}
Box = tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive), pixel coordinates


@dataclass(frozen=True)
class BankObject:
    name: str
    image: Image.Image  # RGBA, cropped to its visible (alpha > 0) content
    source: str
    coco_id: Optional[int] = None  # the COCO image it was cut from (`coco_ids.json`), if known


@dataclass
class ObjectBank:
    objects: list[BankObject]
    backgrounds: list[tuple[str, Image.Image]]
    skipped: Counter

    @property
    def names(self) -> list[str]:
        return sorted({o.name for o in self.objects})


@dataclass
class StitchedPair:
    relation: str  # "left" or "above": in the anchor, A is left of / above B
    names: tuple[str, str]  # (A, B)
    anchor: Image.Image
    mirrored: Image.Image
    anchor_caption: str
    mirrored_caption: str
    anchor_masks: tuple[np.ndarray, np.ndarray]  # bool [H, W] alpha masks of A and B
    mirrored_masks: tuple[np.ndarray, np.ndarray]
    background: str
    coco_ids: tuple[int, ...] = ()  # COCO images the objects were cut from (sorted, distinct)

    def boxes(self, which: str) -> list[Box]:
        masks = self.anchor_masks if which == "anchor" else self.mirrored_masks
        return [mask_box(m) for m in masks]


def object_name(path: Path) -> str:
    stem = re.sub(r"_\d+$", "", path.stem)
    return " ".join(stem.replace("-", " ").replace("_", " ").split()).lower()


def article(name: str) -> str:
    if re.match(r"^(a|an|the|one|two|\d+)\s", name):
        return name
    return ("an " if name[:1] in "aeiou" else "a ") + name


def mask_box(mask: np.ndarray) -> Box:
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        raise ValueError("empty mask has no box")
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _as_object(image: Image.Image, where: str) -> Image.Image:
    rgba = image.convert("RGBA")
    box = rgba.getchannel("A").getbbox()
    if box is None:
        raise BadImage(f"{where}: fully transparent, no object to place")
    return rgba.crop(box)


def load_object_bank(folder: str | Path, backgrounds: Optional[str | Path] = None) -> ObjectBank:
    """Read every object image in `folder` (and backgrounds); bad files are skipped and counted."""
    folder = Path(folder)
    skipped: Counter = Counter()
    objects = []
    coco_ids = _coco_ids(folder)
    for path in list_image_files(folder):
        try:
            objects.append(BankObject(object_name(path), _as_object(load_image_file(path), str(path)),
                                      path.name, coco_ids.get(path.name)))
        except BadImage as err:
            log.warning("skipping object image: %s", err)
            skipped["corrupt_image"] += 1
    bg_folder = Path(backgrounds) if backgrounds else folder / "backgrounds"
    bgs = []
    if bg_folder.is_dir():
        for path in list_image_files(bg_folder):
            try:
                bgs.append((path.name, load_image_file(path, "RGB")))
            except BadImage as err:
                log.warning("skipping background: %s", err)
                skipped["corrupt_background"] += 1
    elif backgrounds:
        raise FileNotFoundError(f"{bg_folder}: backgrounds folder does not exist")
    bank = ObjectBank(objects, bgs, skipped)
    if len(bank.names) < 2:
        raise ValueError(f"{folder}: object bank needs at least two differently named readable "
                         f"objects, found {bank.names} ({dict(skipped) or 'none skipped'})")
    return bank


def _coco_ids(folder: Path) -> dict[str, int]:
    """`coco_ids.json` of a bank (`prepare cocobank`), or {} when it has none."""
    path = folder / "coco_ids.json"
    if not path.is_file():
        return {}
    try:
        return {str(k): int(v) for k, v in json.loads(path.read_text()).items()}
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{path}: not a JSON object of file name -> COCO image id; rerun "
                         "prepare cocobank or delete it") from None


def _pick_pair(bank: ObjectBank, rng: np.random.Generator) -> tuple[BankObject, BankObject]:
    first = bank.objects[rng.integers(len(bank.objects))]
    others = [o for o in bank.objects if o.name != first.name]
    return first, others[rng.integers(len(others))]


def _sizes(objs, rng, canvas, axis, gap, scale) -> list[tuple[int, int]]:
    """Random sizes (longest side a fraction of the canvas), shrunk so both fit along `axis`."""
    side = min(canvas)
    sizes = []
    for obj in objs:
        w, h = obj.image.size
        f = rng.uniform(*scale) * side / max(w, h)
        sizes.append((w * f, h * f))
    along = sum(s[axis] for s in sizes)
    room = canvas[axis] - gap
    shrink = min(1.0, room / along,
                 *(canvas[1 - axis] / s[1 - axis] for s in sizes))
    return [(max(1, int(w * shrink)), max(1, int(h * shrink))) for w, h in sizes]


def _place(sizes, rng, canvas, axis, gap) -> list[list[int]]:
    """Top-left corners: A first, leaving room for gap + B; then B strictly beyond A."""
    (sa, sb) = sizes
    free = canvas[axis] - sa[axis] - gap - sb[axis]
    a_pos = int(rng.integers(0, free + 1))
    b_pos = int(rng.integers(a_pos + sa[axis] + gap, canvas[axis] - sb[axis] + 1))
    corners = []
    for size, pos in ((sa, a_pos), (sb, b_pos)):
        other = int(rng.integers(0, canvas[1 - axis] - size[1 - axis] + 1))
        corners.append([pos, other] if axis == 0 else [other, pos])
    return corners


def _background(bank: ObjectBank, rng, canvas) -> tuple[str, Image.Image]:
    if bank.backgrounds:
        name, image = bank.backgrounds[rng.integers(len(bank.backgrounds))]
        return name, ImageOps.fit(image, canvas, Image.Resampling.BILINEAR).convert("RGBA")
    colour = tuple(int(c) for c in rng.integers(0, 256, 3))
    return "#%02x%02x%02x" % colour, Image.new("RGBA", canvas, colour + (255,))


def _render(background, layers, corners) -> tuple[Image.Image, tuple[np.ndarray, ...]]:
    canvas = background.copy()
    masks = []
    for layer, (x, y) in zip(layers, corners):
        canvas.alpha_composite(layer, (x, y))
        mask = np.zeros((canvas.height, canvas.width), bool)
        mask[y:y + layer.height, x:x + layer.width] = np.asarray(layer.getchannel("A")) > 0
        masks.append(mask)
    return canvas.convert("RGB"), tuple(masks)


def _caption(relation: str, first: str, second: str, rng) -> str:
    """`first` is left of / above `second`; either phrasing, a fair coin."""
    forward, backward = PHRASES[relation]
    if rng.random() < 0.5:
        return f"{article(first)} {forward} {article(second)}"
    return f"{article(second)} {backward} {article(first)}"


def make_pair(bank: ObjectBank, index: int, seed: int = 0, size: tuple[int, int] = (224, 224),
              relations: Sequence[str] = RELATIONS, scale: tuple[float, float] = (0.25, 0.45),
              gap: int = 4) -> StitchedPair:
    """Stitched pair number `index`: a function of (bank, index, seed, options) alone."""
    bad = set(relations) - set(RELATIONS)
    if bad or not relations:
        raise ValueError(f"relations {sorted(bad) or '[]'} invalid; choose from {RELATIONS}")
    rng = np.random.default_rng([seed, index])
    relation = relations[rng.integers(len(relations))]
    axis = RELATIONS.index(relation)
    objs = _pick_pair(bank, rng)
    sizes = _sizes(objs, rng, size, axis, gap, scale)
    layers = [o.image.resize(s, Image.Resampling.LANCZOS) for o, s in zip(objs, sizes)]
    corners = _place(sizes, rng, size, axis, gap)
    mirrored = [list(c) for c in corners]
    for c, s in zip(mirrored, sizes):
        c[axis] = size[axis] - c[axis] - s[axis]  # reflect positions, not the objects
    bg_name, background = _background(bank, rng, size)
    anchor, anchor_masks = _render(background, layers, corners)
    mirror, mirror_masks = _render(background, layers, mirrored)
    a, b = objs[0].name, objs[1].name
    return StitchedPair(relation=relation, names=(a, b), anchor=anchor, mirrored=mirror,
                        anchor_caption=_caption(relation, a, b, rng),
                        mirrored_caption=_caption(relation, b, a, rng),
                        anchor_masks=anchor_masks, mirrored_masks=mirror_masks, background=bg_name,
                        coco_ids=tuple(sorted({o.coco_id for o in objs if o.coco_id is not None})))


def pair_sample(pair: StitchedPair, key: str, index: int, ext: str = "jpg") -> ShardSample:
    meta = {"source": "stitch", "image_id": key, "pair_index": index, "relation": pair.relation,
            "objects": list(pair.names), "background": pair.background,
            "boxes": {"anchor": [list(b) for b in pair.boxes("anchor")],
                      "mirrored": [list(b) for b in pair.boxes("mirrored")]}}
    if pair.coco_ids:
        meta["coco_ids"] = list(pair.coco_ids)
    partner = Partner(image=encode_image(pair.mirrored, ext), caption=pair.mirrored_caption,
                      kind="mirrored", image_ext=ext)
    return ShardSample(key=key, caption=pair.anchor_caption, image=encode_image(pair.anchor, ext),
                       image_ext=ext, meta=meta, partner=partner)


def write_stitched(out_dir: str | Path, bank_dir: str | Path, n_pairs: int, seed: int = 0,
                   size: tuple[int, int] = (224, 224), relations: Sequence[str] = RELATIONS,
                   scale: tuple[float, float] = (0.25, 0.45), gap: int = 4, ext: str = "jpg",
                   backgrounds: Optional[str | Path] = None, key_prefix: str = "lr",
                   max_count: int = 10_000, max_bytes: int = 1 << 30, progress: bool = False) -> dict:
    """Write `n_pairs` stitched samples into a shard set; resumes an interrupted one.

    `progress`: a bar on stderr (pairs written of `n_pairs`).
    """
    from compclip.cli import progress as bar_of
    bank = load_object_bank(bank_dir, backgrounds)
    features = {"partner": "mirrored", "relations": list(relations)}
    writer = ShardSetWriter(out_dir, max_count=max_count, max_bytes=max_bytes, features=features,
                            order=shuffled_order(seed))
    writer.manifest["object_bank"] = {"folder": str(bank_dir), "objects": len(bank.objects),
                                      "names": len(bank.names), "backgrounds": len(bank.backgrounds),
                                      "skipped": dict(bank.skipped)}
    start = writer.inputs_done
    if start:
        log.info("%s: resuming after %d complete pairs", out_dir, start)
    order = permutation(n_pairs, seed)
    with bar_of(total=n_pairs, initial=start, desc="stitch", unit="pair", quiet=not progress) as bar:
        for index in (int(i) for i in order[start:]):
            pair = make_pair(bank, index, seed, size, relations, scale, gap)
            writer.add(pair_sample(pair, f"{key_prefix}{index:08d}", index, ext))
            bar.update(1)
    return writer.close()
