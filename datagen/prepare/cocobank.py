"""An object bank for `python -m datagen stitch` cut out of COCO instance annotations.

    write_coco_object_bank("annotations/instances_train2017.json", "train2017/", "data/objects/coco")

For each category, up to `per_class` instances are drawn (seeded, per category) among those that
are not crowd regions, have a polygon outline, a box of at least `min_size` pixels on both sides
and an outline covering at least `min_fill` of that box (no slivers of occluded objects). Each is
cut out with its polygon as the alpha channel, shrunk to at most `max_side` pixels, and saved as
`<category>_<annotation id>.png` (spaces as `_`), which the stitcher names back as the category
("traffic_light_1234.png" -> "traffic light"). Files are written under a temporary name and
renamed, and existing ones are kept, so a rerun continues an interrupted one. A missing or
unreadable COCO image raises an error naming it, or with `skip_missing` is skipped and counted.

Benchmark images are left out as `prepare coco` leaves them out (`datagen.prepare.exclude`, an
`exclusion` given by the caller): no cut-out comes from a COCO image a scored benchmark uses
(VISLA-Spatial, Karpathy test, ...). `coco_ids.json` in the bank maps each cut-out's file name to
the COCO image it was cut from (written before the cut-outs, for every instance chosen), so
stitched samples name their source images (`meta["coco_ids"]`, `datagen.images.stitch`) and the
trainer's benchmark-overlap guard sees them.
"""
from __future__ import annotations

import json
import os
import random
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

from PIL import Image, ImageDraw

from compclip.shardset.imageio import BadImage, load_image_file
from compclip.datagen.prepare.exclude import Exclusion
from compclip.datagen.prepare.imagefiles import MissingImage
from compclip.fileio import atomic_write

COCO_IDS = "coco_ids.json"  # cut-out file name -> COCO image id


def _polygon_area(poly: list[float]) -> float:
    xs, ys = poly[0::2], poly[1::2]
    return 0.5 * abs(sum(xs[i] * ys[i - 1] - xs[i - 1] * ys[i] for i in range(len(xs))))


def select_instances(data: dict, per_class: int, min_size: int, min_fill: float,
                     seed: int, exclusion: Optional[Exclusion] = None) -> list[dict]:
    """The annotations to cut out, grouped by image (each image is opened once); none of an
    image `exclusion` leaves out."""
    by_cat: dict[int, list[dict]] = defaultdict(list)
    for ann in data.get("annotations", []):
        if exclusion is not None and not exclusion.keeps(ann.get("image_id")):
            continue
        seg, (x, y, w, h) = ann.get("segmentation"), ann.get("bbox", (0, 0, 0, 0))
        if ann.get("iscrowd") or not isinstance(seg, list) or not seg or min(w, h) < min_size:
            continue
        if sum(_polygon_area(p) for p in seg if len(p) >= 6) < min_fill * w * h:
            continue
        by_cat[ann["category_id"]].append(ann)
    chosen = []
    for cat, anns in sorted(by_cat.items()):
        anns.sort(key=lambda a: a["id"])
        rng = random.Random(f"cocobank:{seed}:{cat}")
        chosen += rng.sample(anns, min(per_class, len(anns)))
    return sorted(chosen, key=lambda a: (a["image_id"], a["id"]))


def cut_out(image: Image.Image, ann: dict, max_side: int) -> Image.Image:
    """The instance's box as RGBA, alpha = its polygon outline; shrunk to `max_side`."""
    x, y, w, h = ann["bbox"]
    box = (int(x), int(y), min(image.width, int(x + w + 0.999)), min(image.height, int(y + h + 0.999)))
    mask = Image.new("L", (box[2] - box[0], box[3] - box[1]), 0)
    draw = ImageDraw.Draw(mask)
    for poly in ann["segmentation"]:
        if len(poly) >= 6:
            draw.polygon([(poly[i] - box[0], poly[i + 1] - box[1]) for i in range(0, len(poly), 2)],
                         fill=255)
    crop = image.crop(box).convert("RGBA")
    crop.putalpha(mask)
    if max(crop.size) > max_side:
        scale = max_side / max(crop.size)
        crop = crop.resize((max(1, round(crop.width * scale)), max(1, round(crop.height * scale))),
                           Image.Resampling.BICUBIC)
    return crop


def file_stem(category: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", category.lower()).strip("_")


def write_coco_object_bank(instances: str | Path, images_root: str | Path, out_dir: str | Path,
                           per_class: int = 100, min_size: int = 48, min_fill: float = 0.3,
                           max_side: int = 128, seed: int = 0, skip_missing: bool = False,
                           limit_images: Optional[int] = None, progress: bool = False,
                           exclusion: Optional[Exclusion] = None) -> dict[str, Any]:
    """Write the bank (see the module docstring); returns counts, and with `exclusion` its record
    (`excluded`, `exclusion`: images and annotations left out). `progress`: a bar on stderr
    (COCO images done of those holding a chosen instance)."""
    from compclip.cli import progress as bar_of
    instances, images_root, out_dir = Path(instances), Path(images_root), Path(out_dir)
    try:
        data = json.loads(instances.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{instances}: cannot read COCO instances JSON ({err})") from None
    files = {img["id"]: img["file_name"] for img in data.get("images", [])}
    names = {c["id"]: c["name"] for c in data.get("categories", [])}
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = select_instances(data, per_class, min_size, min_fill, seed, exclusion)
    by_image: dict[int, list[dict]] = defaultdict(list)
    for ann in chosen:
        by_image[ann["image_id"]].append(ann)
    sources = {_file_name(a, names): a["image_id"] for a in chosen}
    atomic_write(out_dir / COCO_IDS, lambda f: json.dump(dict(sorted(sources.items())), f, indent=0), "w")
    counts: Counter = Counter()
    todo_images = sorted(by_image.items())[:limit_images]
    with bar_of(total=len(todo_images), desc="cocobank", unit="image", quiet=not progress) as bar:
        for image_id, anns in todo_images:
            _cut_image(image_id, anns, names, files, images_root, out_dir, max_side,
                       skip_missing, counts)
            bar.update(1)
    record = {}
    if exclusion is not None:
        anns = data.get("annotations", [])
        record = exclusion.manifest_keys({a["image_id"] for a in anns if "image_id" in a},
                                         sum(not exclusion.keeps(a.get("image_id")) for a in anns))
    return {"out": str(out_dir), "objects": counts["written"] + counts["kept"],
            "categories": len({a["category_id"] for a in chosen}), **dict(counts), **record}


def _file_name(ann: dict, names: dict) -> str:
    return f"{file_stem(names[ann['category_id']])}_{ann['id']}.png"


def _cut_image(image_id: int, anns: list[dict], names: dict, files: dict, images_root: Path,
               out_dir: Path, max_side: int, skip_missing: bool, counts: Counter) -> None:
    """Write the cut-outs of one COCO image not written yet (counted in `counts`)."""
    todo = [(a, out_dir / _file_name(a, names)) for a in anns]
    todo = [(a, p) for a, p in todo if not p.exists()]
    counts["kept"] += len(anns) - len(todo)
    if not todo:
        return
    path = images_root / files.get(image_id, f"{image_id:012d}.jpg")
    try:
        if not path.is_file():
            raise MissingImage(f"{path}: image file not found (instances of image_id {image_id})")
        image = load_image_file(path, "RGB")
    except (MissingImage, BadImage):
        if not skip_missing:
            raise
        counts["missing_image" if not path.is_file() else "corrupt_image"] += len(todo)
        return
    for ann, dest in todo:
        tmp = dest.with_name(f".{dest.name}.tmp")
        cut_out(image, ann, max_side).save(tmp, format="PNG")
        os.replace(tmp, dest)
        counts["written"] += 1
