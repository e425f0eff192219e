"""Loader throughput per worker on COCO-size JPEGs: can the data path feed a GPU?

    .venv/bin/python bench/bench_loader.py [--batches 6] [--reps 3] [--quick]

Images: 640 x 480 JPEGs generated at bench time (smooth noise, coloured shapes and fine grain,
quality 90: ~100-200 KB, the size and entropy of a COCO photo), `--distinct` of them cycled over
the samples; captions and hard negatives are real COCO captions (bench.common.coco_captions).
Output: 224 px (`ViT-B-32`'s train transform, random init; only its transform and tokenizer are
used).

Path: the trainer's own. A recipe per layout goes through `trainer.recipe.validate_recipe`,
`trainer.streams.train_stream` (Composer + ShardStream, shards written by
compclip.shardset.shards.ShardSetWriter) and `trainer.data.make_loader`, so decoding, `data.jpeg_draft`
(PIL draft: DCT-domain downscale to >= 224 px), RandomResizedCrop, partner and neighbour fetch
(through keys.tsv), negatives, tokenising and collating are what training does. Layouts, by
images per anchor: plain 1; TROHN-Img 2 (generated partner image); NegCLIP-style 2 (neighbour
fetched through keys.tsv) with 2 negatives; left-right 34/32 (30 plain + 2 stitched anchors with
mirrored partners, the recipe's 448 + 32 of 480 scaled down). Rows: each layout with and without
`jpeg_draft`, with uint8 images (what the trainer sends; normalised on the device,
trainer/transforms.py) and with float images (open_clip's whole transform in the worker).

Measures, per row and repetition (rows interleaved, `--reps` times):
- `loader`: anchors/s delivered by a DataLoader with ONE worker process (wall time of
  `--batches` batches after `--warmup` batches: worker start-up and the shuffle buffer are outside
  the window); on a shared machine this also carries other jobs' load;
- `cpu`: anchors per CPU-second of the same stream iterated in this process (process time of
  the same batches): what one fully busy worker delivers, less sensitive to other load.
Goal: >= 120 NegCLIP-style anchors/s per worker at 224 px (`jpeg_draft`, uint8), on `cpu`.
Writes bench/results/loader.json.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import coco_captions, log, summarize, write_caption_shards, write_result  # noqa: E402

ARCH = "ViT-B-32"
GOAL = 120.0
# layout -> (partner, negatives per image, images per anchor, label)
LAYOUTS = {
    "plain": ("none", 0, 1.0, "plain CLIP"),
    "trohn_img": ("generated", 0, 2.0, "TROHN-Img (generated partner image)"),
    "negclip": ("neighbour", 2, 2.0, "NegCLIP-style (neighbour via keys.tsv, 2 negatives)"),
    "leftright": ("mirrored", 0, 34 / 32, "left-right (30 plain + 2 stitched with mirrored partners)"),
}


def photo_jpeg(seed: int, size: tuple[int, int] = (640, 480), quality: int = 90) -> bytes:
    """A COCO-like JPEG: smooth colour noise, random shapes, fine grain; ~100-200 KB at q90."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter
    rng = np.random.default_rng(seed)
    w, h = size
    base = rng.integers(0, 256, (h // 16, w // 16, 3), dtype=np.uint8)
    image = Image.fromarray(base).resize(size, Image.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, w - 40)), int(rng.integers(0, h - 40))
        x1, y1 = x0 + int(rng.integers(30, w // 2)), y0 + int(rng.integers(30, h // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(1.0))
    grain = rng.normal(0, 14, (h, w, 3))
    pixels = np.clip(np.asarray(image, dtype=np.float32) + grain, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def write_sets(tmp: Path, n: int, distinct: int) -> dict:
    """One shard set per partner kind, 640 x 480 JPEGs cycled from `distinct` generated ones."""
    photos = [photo_jpeg(i) for i in range(distinct)]
    log(f"loader: {distinct} JPEGs of 640x480, {sum(map(len, photos)) / len(photos) / 1024:.0f} KB on average")
    pairs = coco_captions()
    image = lambda i: photos[i % len(photos)]  # noqa: E731
    sets = {"none": write_caption_shards(tmp / "none", pairs, n, negatives=2, image=image),
            "generated": write_caption_shards(tmp / "generated", pairs, n, negatives=2, partner="generated",
                                              image=image, offset=n),
            "neighbour": write_caption_shards(tmp / "neighbour", pairs, n, negatives=2, neighbours=3,
                                              image=image, offset=2 * n),
            "mirrored": write_caption_shards(tmp / "mirrored", pairs, n, partner="mirrored", image=image,
                                             offset=3 * n, prefix="m")}
    return {"sets": sets, "jpeg_kb": summarize([len(p) / 1024 for p in photos], 1)}


def recipe_for(layout: str, sets: dict, batch: int, draft: bool):
    from compclip.trainer.recipe import validate_recipe
    partner, negs, _, _ = LAYOUTS[layout]
    data = {"train_shards": [str(sets[partner])], "samples_per_epoch": 100_000, "batch_size": batch,
            "workers": 1, "shuffle_buffer": 64, "partner": partner, "jpeg_draft": draft}
    if layout == "leftright":
        stitched = max(1, round(batch / 16))
        data.update(train_shards=[str(sets["none"]), str(sets["mirrored"])], source_batch=[batch - stitched, stitched])
    return validate_recipe({"name": "loader", "seed": 0, "model": {"arch": ARCH}, "data": data,
                            "negatives": {"per_image": negs}, "optim": {"lr": 1e-4}, "schedule": {"epochs": 1}},
                           f"<loader bench {layout}>")


def make_stream(layout: str, sets: dict, batch: int, draft: bool, uint8: bool, loaded):
    """The trainer's training stream for a layout; float rows put open_clip's whole transform back."""
    from compclip.trainer.data import resolve_sources
    from compclip.trainer.streams import train_stream
    recipe = recipe_for(layout, sets, batch, draft)
    stream = train_stream(recipe, resolve_sources(recipe.data.train_shards), loaded, 0, 1, False)
    if not uint8:
        stream.composer = replace(stream.composer, preprocess=loaded.preprocess_train)
    stream.batches_per_epoch = 10_000
    stream.set_position(0, 0, {})
    return stream


def measure(layout: str, sets: dict, args, draft: bool, uint8: bool, loaded) -> dict:
    """(anchors/s through a 1-worker DataLoader, anchors per CPU-second in this process)."""
    import torch
    from compclip.trainer.data import make_loader
    batches = iter(make_loader(make_stream(layout, sets, args.batch, draft, uint8, loaded), 1, 0))
    for _ in range(args.warmup):
        batch, _ = next(batches)
    dtype = str(batch.images.dtype).removeprefix("torch.")
    start, anchors = time.perf_counter(), 0
    for _ in range(args.batches):
        batch, _ = next(batches)
        anchors += batch.num_anchors
    loader_rate = anchors / (time.perf_counter() - start)
    del batches
    torch.set_num_threads(1)
    stream = iter(make_stream(layout, sets, args.batch, draft, uint8, loaded))
    for _ in range(args.warmup):
        next(stream)
    start, anchors, images = time.process_time(), 0, 0
    for _ in range(args.batches):
        batch, _ = next(stream)
        anchors += batch.num_anchors
        images += batch.images.shape[0]
    cpu = time.process_time() - start
    return {"loader_anchors_per_s": loader_rate, "cpu_anchors_per_s": anchors / cpu,
            "images_per_anchor": images / anchors, "dtype": dtype}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32, help="anchors per batch")
    p.add_argument("--batches", type=int, default=6, help="timed batches per row and repetition")
    p.add_argument("--warmup", type=int, default=2, help="batches before the timing window")
    p.add_argument("--reps", type=int, default=3, help="repetitions, rows interleaved (the median of 3 sets one disturbed repetition aside; of 2 it is their mean)")
    p.add_argument("--samples", type=int, default=256, help="samples per shard set")
    p.add_argument("--distinct", type=int, default=32, help="distinct generated JPEGs")
    p.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=list(LAYOUTS))
    p.add_argument("--quick", action="store_true", help="2 timed batches, 1 rep, 8 JPEGs")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.quick:
        args.batches, args.warmup, args.reps, args.samples, args.distinct = 2, 1, 1, 96, 8
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from compclip.models import load_model
    loaded = load_model(ARCH)
    rows = [(layout, draft, uint8) for layout in args.layouts for draft in (True, False) for uint8 in (True, False)]
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_loader_") as tmp:
        written = write_sets(Path(tmp), args.samples, args.distinct)
        for rep in range(args.reps):
            for layout, draft, uint8 in (rows if rep % 2 == 0 else rows[::-1]):
                key = f"{layout}/{'draft' if draft else 'full'}/{'uint8' if uint8 else 'float'}"
                r = measure(layout, written["sets"], args, draft, uint8, loaded)
                r["load_avg_1min"] = round(os.getloadavg()[0], 2)
                runs.setdefault(key, []).append(r)
                log(f"loader rep {rep + 1}/{args.reps} {key:26s} {r['cpu_anchors_per_s']:6.1f} anchors/CPU-s, "
                    f"{r['loader_anchors_per_s']:6.1f} anchors/s through 1 worker")
    table = {}
    for key, rs in runs.items():
        layout, decode, output = key.split("/")
        table[key] = {"layout": layout, "label": LAYOUTS[layout][3], "jpeg_draft": decode == "draft",
                      "output": output, "images_per_anchor": round(rs[0]["images_per_anchor"], 4),
                      "cpu_anchors_per_s": summarize([r["cpu_anchors_per_s"] for r in rs], 1),
                      "loader_anchors_per_s": summarize([r["loader_anchors_per_s"] for r in rs], 1),
                      "runs": rs}
    goal_row = table.get("negclip/draft/uint8")
    result = {"arch_transform": ARCH, "output_px": loaded.model.visual.image_size, "batch": args.batch,
              "batches": args.batches, "warmup_batches": args.warmup, "reps": args.reps,
              "jpeg": {"size": [640, 480], "quality": 90, "distinct": args.distinct, "kb": written["jpeg_kb"]},
              "captions": "COCO (SugarCrepe caption/negative_caption fields)",
              "method": "trainer.streams.train_stream + trainer.data.make_loader; loader = 1 worker, wall; "
                        "cpu = same stream in-process, process time",
              "rows": table,
              "goal": f">= {GOAL:.0f} NegCLIP-style anchors/s per worker (jpeg_draft, uint8, cpu)",
              "goal_met": bool(goal_row) and goal_row["cpu_anchors_per_s"]["median"] >= GOAL}
    write_result("loader", result, args.out)


if __name__ == "__main__":
    main()
