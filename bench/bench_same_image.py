"""Same-image pairs per training batch: a 5-captions-per-image set in input order vs global order.

    .venv/bin/python bench/bench_same_image.py            # Karpathy train size: 113,287 images
    .venv/bin/python bench/bench_same_image.py --quick    # 50,000 images, fewer batches

A caption set in Karpathy order (image after image, its 5 captions next to each other; one tiny
fixture JPEG as every image, `json` = {source, image_id, coco_id}) is written twice with
`ShardSetWriter` (10,000 samples per shard, as `prepare coco` writes): (a) `input order`, as
the project wrote before issue 15, and (b) `global order`, the permutation `compclip.shardset.order`
gives every writer now (`shuffled(items, seed)`, as `run_generate` applies it). Each set is
then streamed through the trainer's own data path, `trainer.data.ShardStream` + `make_loader`
in resampled mode (shards drawn with replacement, shuffle buffer 2,000 unless a row says
otherwise, 1 loader worker), with a composer that returns each anchor's (source, image_id)
instead of tensors, so what is measured is the order the trainer's batches get. Reported per
row: the share of anchors in a batch of 256 that share their image with another anchor of the
same batch (`same_image_share`), and the expected share for a uniformly random order of the
same set. Goal: <= 0.5 % with the global order. Results: bench/results/same_image.json.

Two more rows read the *input-order* set the way the papers' recipes do, with the trainer's
exact-pass epochs (`trainer.exact.ExactStream`: a global permutation per epoch, random access), so
the write order no longer matters; and for every row, `unmasked_same_image_pairs` counts the
same-image pairs of its batches that the loss's false-negative mask (`trainer.loss.same_image`,
`loss.mask_same_image`) leaves as negatives: 0 means none reaches the loss.

`same_image_share(batches_of_image_ids)` is importable, to add rows for other readers.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import log, write_result  # noqa: E402

GOAL = 0.005
CAPTIONS_PER_IMAGE = 5
KARPATHY_TRAIN_IMAGES = 113_287  # Karpathy train + restval


def same_image_share(batches_of_image_ids: Iterable[Sequence[Any]]) -> float:
    """Share of anchors (over all batches) whose image id occurs more than once in its batch."""
    shared = total = 0
    for ids in batches_of_image_ids:
        counts = Counter(ids)
        shared += sum(1 for i in ids if counts[i] > 1)
        total += len(ids)
    if not total:
        raise ValueError("same_image_share: no anchors")
    return shared / total


def expected_random_share(images: int, per_image: int, batch: int) -> float:
    """The same share for a uniformly random order: 1 - P(none of the image's other captions
    among the batch's other batch-1 places)."""
    n = images * per_image
    p_none = 1.0
    for j in range(per_image - 1):
        p_none *= (n - batch - j) / (n - 1 - j)
    return 1.0 - p_none


def tiny_jpeg() -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (120, 60, 30)).save(buf, format="JPEG", quality=80)
    return buf.getvalue()


def karpathy_items(images: int) -> list[tuple[int, int]]:
    """(image id, caption number) in Karpathy order: the 5 captions of an image together."""
    return [(100_000 + i, j) for i in range(images) for j in range(CAPTIONS_PER_IMAGE)]


def write_caption_set(out: Path, items: list[tuple[int, int]], order: dict,
                      shard_size: int = 10_000) -> dict:
    from compclip.shardset.schema import ShardSample
    from compclip.shardset.shards import ShardSetWriter
    image = tiny_jpeg()
    with ShardSetWriter(out, max_count=shard_size, order=order) as writer:
        for image_id, j in items:
            writer.add(ShardSample(f"coco{image_id}_{j}", f"caption {j} of image {image_id}", image,
                                   meta={"source": "fixture", "image_id": image_id, "coco_id": image_id}))
    from compclip.shardset.shards import read_manifest
    return read_manifest(out)


@dataclass
class ImageIdComposer:
    """Stands in for `trainer.compose.Composer` in `ShardStream`: an item is the anchor's
    (source, image_id) from its `json` member; a batch is the list of them."""
    batch_size: int
    partner: str = "none"
    num_partners: int = 0
    negatives_per_image: int = 0
    kinds: tuple = ()
    subkinds: Optional[tuple] = None

    def item(self, raw: dict, rng, source_dir: Optional[str] = None, with_partner: bool = False,
             negative_choice: Optional[int] = None):
        meta = json.loads(raw["json"])
        return meta["source"], meta["image_id"]

    def collate(self, items: list) -> list:
        return list(items)


def stream_image_ids(shard_set: Path, batches: int, batch: int = 256, buffer: int = 2000,
                     workers: int = 1, seed: int = 0) -> list[list]:
    """Batches of (source, image_id) as the trainer's resampled streams deliver them."""
    from compclip.trainer.data import ShardStream, make_loader, resolve_sources
    stream = ShardStream(resolve_sources([str(shard_set)]), None, ImageIdComposer(batch), seed=seed,
                         rank=0, world_size=1, batches_per_epoch=batches, num_streams=max(1, workers),
                         shuffle_buffer=buffer, max_bad_fraction=0.0)
    # the DataLoader turns tuples into lists: back to hashable (source, image_id) pairs
    return [[tuple(i) for i in ids] for ids, _ in make_loader(stream, workers, seed, 0)]


def exact_image_ids(shard_set: Path, batches: int, batch: int = 256, seed: int = 0) -> list[list]:
    """Batches of (source, image_id) as the trainer's exact-pass epochs deliver them."""
    from compclip.trainer.data import make_loader, resolve_sources
    from compclip.trainer.exact import ExactStream
    from compclip.trainer.sample_index import SampleIndex
    sources = resolve_sources([str(shard_set)])
    stream = ExactStream(sources, [SampleIndex.load(shard_set)], ImageIdComposer(batch), seed, 0, 1, 1, 0.0)
    stream.batches_per_epoch = min(batches, stream.available_batches)
    return [[tuple(i) for i in ids] for ids, _ in make_loader(stream, 1, seed, 0)]


def unmasked_same_image_pairs(batches_of_image_ids: Iterable[Sequence[Any]]) -> int:
    """Same-image anchor pairs left as negatives by the loss's false-negative mask (both
    directions, image->text and text->image), over all batches."""
    import torch
    from compclip.trainer.compose import stable_id
    from compclip.trainer.loss import Layout, same_image
    left = 0
    for ids in batches_of_image_ids:
        n = len(ids)
        groups = torch.tensor([stable_id(f"{s}:{i}") for s, i in ids])
        layout = Layout(torch.arange(n), torch.ones(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool),
                        torch.full((n,), -1), torch.full((n,), -1), groups, -1 - torch.arange(n))
        i2t, t2i = same_image(layout)
        same = (groups[:, None] == groups[None, :]) & ~torch.eye(n, dtype=torch.bool)
        left += int((same & ~i2t).sum()) + int((same & ~t2i).sum())
    return left


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="50,000 images and 40 batches per row")
    p.add_argument("--images", type=int, default=None, help=f"default {KARPATHY_TRAIN_IMAGES:,}")
    p.add_argument("--batches", type=int, default=None, help="batches of 256 per row (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default=None, help="where the two sets go (default a temp folder)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from compclip.shardset.order import input_order, shuffled, shuffled_order
    images = args.images or (50_000 if args.quick else KARPATHY_TRAIN_IMAGES)
    batches = args.batches or (40 if args.quick else 200)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="same_image_"))
    items = karpathy_items(images)
    rows = []
    try:
        sets = {"input order": (work / "input_order", items, input_order()),
                "global order": (work / "global_order", shuffled(items, args.seed),
                                 shuffled_order(args.seed))}
        for name, (folder, ordered, record) in sets.items():
            log(f"writing {len(ordered):,} captions of {images:,} images in {name} -> {folder}")
            if folder.exists():
                shutil.rmtree(folder)
            write_caption_set(folder, ordered, record)
        cases = [("input order", 2000), ("global order", 2000), ("input order", 10_000),
                 ("global order", 10_000)]
        for name, buffer in cases + [("input order", None)]:
            if buffer is None:
                log(f"reading {batches} batches of 256: {name}, exact-pass epoch (global permutation)")
                ids = exact_image_ids(sets[name][0], batches, 256, seed=args.seed)
                reader = "ExactStream (sampling: exact), 1 worker"
            else:
                log(f"streaming {batches} batches of 256: {name}, shuffle buffer {buffer}")
                ids = stream_image_ids(sets[name][0], batches, 256, buffer, workers=1, seed=args.seed)
                reader = "ShardStream resampled, 1 worker"
            share = same_image_share(ids)
            rows.append({"order": name, "reader": reader, "shuffle_buffer": buffer, "batch": 256,
                         "batches": len(ids), "same_image_share": round(share, 5),
                         "unmasked_same_image_pairs": unmasked_same_image_pairs(ids)})
            log(f"  {share:.2%} of anchors share their image with another anchor of their batch; "
                f"{rows[-1]['unmasked_same_image_pairs']} such pairs left unmasked by the loss")
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    after = next(r["same_image_share"] for r in rows if r["order"] == "global order"
                 and r["shuffle_buffer"] == 2000)
    write_result("same_image", {
        "images": images, "captions_per_image": CAPTIONS_PER_IMAGE, "samples": len(items),
        "shard_size": 10_000, "seed": args.seed, "rows": rows,
        "expected_uniform_random": round(expected_random_share(images, CAPTIONS_PER_IMAGE, 256), 5),
        "goal": GOAL, "goal_met": after <= GOAL}, args.out)


if __name__ == "__main__":
    main()
