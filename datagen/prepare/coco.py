"""COCO captions + images -> a shard set with hard negatives, and optionally K image neighbours.

    prepare_coco("data/shards/coco", "data/coco/train2017",
                 CocoOptions(captions="data/coco/annotations/captions_train2017.json"))
    prepare_coco("data/shards/coco_negclip", ..., CocoOptions(..., rules="negclip", mode="all",
                 cap=64, require_negative=True, knn=3, scorer_factory=make_scorer))

Two existing stages, chained, nothing re-implemented:

1. `datagen.negatives.pipeline.run_generate` with `images=ImageFiles(images_root)`: one sample
   per caption with `jpg` (the file's bytes), `txt`, `json` (source, image_id, image_path[, split])
   and `neg.json` (rule negatives of the rule set `rules`: compclip's swap / replace / add, or
   negclip's swaps, NegCLIP's own procedure). Input: COCO 2017 `captions_*.json`
   (image files `<images_root>/<file_name>`, i.e. the `train2017/` folder) or Karpathy's
   `dataset_coco.json` (image files `<images_root>/<filepath>/<filename>`, i.e. the folder that
   holds `train2014/` and `val2014/`), filtered to `splits`. A missing image file stops the run
   with an error naming the file and the caption key, or with `skip_missing` is skipped and
   counted. Resumable: rerun the same command. Captions are written in a seeded global
   order (`compclip.shardset.order`, seed `seed`), so the captions of one image are not neighbours.
   Benchmark images are left out by COCO id (`datagen.prepare.exclude`: Karpathy val + test,
   COCO val2017, every scored benchmark under `benchmarks_root`) unless `keep_benchmark_images`;
   the manifest records `excluded` / `exclusion`, and `image_ids.txt` lists the COCO ids kept.
2. With `knn=K`: `datagen.images.knn.run_knn` embeds the images of stage 1's set, finds each image's K
   nearest neighbours and writes the final set (`nn.json`, `keys.tsv`). Stage 1 then goes to
   `base` (default `<out>_base`); a complete base set is reused as it is, read and never
   written (it may be read-only), so `base` may be an earlier run's plain output made with the
   same options (the command line compares the options and captions file it records).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from compclip.datagen.negatives.captions_io import CaptionItem, read_items
from compclip.datagen.prepare.exclude import (DEFAULT_BENCHMARKS_ROOT, Exclusion, benchmark_exclusion,
                                     pin_exclusion, sibling_val2017)
from compclip.datagen.negatives.base import SPACY_MODEL
from compclip.datagen.prepare.imagefiles import ImageFiles
from compclip.shardset.shards import is_complete, read_manifest, update_manifest


def default_base(out_dir: str | Path) -> Path:
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + "_base")


@dataclass
class CocoOptions:
    """What `prepare_coco` does; `python -m datagen prepare coco` builds one.

    `captions` (COCO 2017 `captions_*.json`) or `karpathy` (`dataset_coco.json`): the caption
    source, exactly one; `splits`: the Karpathy splits kept. `kinds`, `rules`, `spacy_model`,
    `require_negative`, `mode`, `cap`, `seed`, `workers`, `shard_size`, `skip_missing`, `limit`
    and `vocab` (its `vocab_path`): stage 1's `datagen.negatives.pipeline.GenerateOptions`.
    `one_caption_per_image`: only the first caption of each image, in the input's order, as
    NegCLIP's data script kept (`first_caption_per_image`). `max_side`: images larger than this
    are re-encoded (`ImageFiles`), else copied as they are. `knn`, `scorer_factory` (makes the
    image model), `base`, `knn_options` (`run_knn` keyword arguments): stage 2. `benchmarks_root`,
    `keep_benchmark_images`, `karpathy_ref` (a Karpathy JSON naming val/test images to exclude;
    default: the input when it is one), `val2017` (`captions_val2017.json`; default: one next to
    the input, if any): the images left out (`datagen.prepare.exclude`). `progress`: messages
    and a bar on stderr."""
    captions: Optional[str | Path] = None
    karpathy: Optional[str | Path] = None
    splits: Sequence[str] = ("train",)
    kinds: Optional[list[str]] = None
    rules: str = "compclip"
    spacy_model: str = SPACY_MODEL
    require_negative: bool = False
    one_caption_per_image: bool = False
    mode: str = "sample"
    cap: int = 8
    seed: int = 0
    workers: int = 1
    shard_size: int = 10_000
    skip_missing: bool = False
    max_side: Optional[int] = None
    limit: Optional[int] = None
    vocab: Optional[str | Path] = None
    knn: int = 0
    scorer_factory: Optional[Callable[[], Any]] = None
    base: Optional[str | Path] = None
    knn_options: Optional[dict] = None
    progress: bool = True
    benchmarks_root: Optional[str | Path] = DEFAULT_BENCHMARKS_ROOT
    keep_benchmark_images: bool = False
    karpathy_ref: Optional[str | Path] = None
    val2017: Optional[str | Path] = None


def prepare_coco(out_dir: str | Path, images_root: str | Path, options: CocoOptions) -> dict[str, Any]:
    """Run stage 1 (and 2 with `options.knn`) as `options` say; returns the final set's manifest."""
    from compclip.datagen.negatives.pipeline import GenerateOptions, run_generate
    o = options
    if (o.captions is None) == (o.karpathy is None):
        raise ValueError("give exactly one caption source: COCO captions JSON or Karpathy JSON")
    if o.knn and o.scorer_factory is None:
        raise ValueError("knn needs a scorer (an image model) to embed the images")
    stage1 = Path(o.base) if (o.knn and o.base) else default_base(out_dir) if o.knn else Path(out_dir)
    if o.knn and (Path(out_dir) / "manifest.json").is_file() and read_manifest(out_dir).get("complete"):
        _say(o.progress, f"prepare coco: {out_dir} is already complete")
        return read_manifest(out_dir)
    source = o.captions if o.captions is not None else o.karpathy
    if o.knn and is_complete(stage1):  # reused as it is: read, never written (it may be read-only)
        _say(o.progress, f"prepare coco: reusing the complete stage-1 set {stage1}")
        return _neighbours(stage1, out_dir, o)
    images = ImageFiles(images_root, o.max_side)
    exclusion = benchmark_exclusion(
        o.benchmarks_root, karpathy=o.karpathy_ref or o.karpathy, keep=o.keep_benchmark_images,
        val2017=o.val2017 or sibling_val2017(source))
    split_list = list(o.splits) if o.karpathy is not None else None
    pin_exclusion(stage1, exclusion)
    _say(o.progress, f"prepare coco: captions + images + negatives -> {stage1}")
    generate = GenerateOptions(kinds=o.kinds, rules=o.rules, spacy_model=o.spacy_model,
                               require_negative=o.require_negative, mode=o.mode, cap=o.cap, seed=o.seed,
                               workers=o.workers, shard_size=o.shard_size, vocab_path=o.vocab,
                               progress=o.progress, limit=o.limit, images=images,
                               skip_missing=o.skip_missing, splits=split_list,
                               select=_select(exclusion, o.one_caption_per_image))
    result = run_generate(source, stage1, generate)
    if result["manifest"].get("complete") and "excluded" not in result["manifest"]:
        keys = exclusion_record(exclusion, source, split_list)
        result["manifest"] = update_manifest(stage1, **keys)
        _say(o.progress, f"prepare coco: {exclusion.summary(keys)}")
    _report(o.progress, stage1, result["manifest"])
    if not o.knn:
        return result["manifest"]
    return _neighbours(stage1, out_dir, o)


def _neighbours(stage1: Path, out_dir: str | Path, o: CocoOptions) -> dict[str, Any]:
    """Stage 2: the complete stage-1 set with its images' `o.knn` neighbours -> `out_dir`."""
    from compclip.datagen.images.knn import run_knn
    total = sum(s["samples"] for s in read_manifest(stage1)["shards"])
    _say(o.progress, f"prepare coco: {o.knn} nearest neighbours of {total} images -> {out_dir}")
    manifest = run_knn(stage1, out_dir, o.scorer_factory(), k=o.knn, max_count=o.shard_size,
                       progress=o.progress, **(o.knn_options or {}))
    _say(o.progress, f"prepare coco: done; {out_dir} is complete" + (
        "" if o.base else f" (the stage-1 set {stage1} may be deleted)"))
    return manifest


def first_caption_per_image(items: Iterable[CaptionItem]) -> Iterator[CaptionItem]:
    """The first caption item of each image (`meta["image_id"]`), in the order given: NegCLIP's
    data script kept one caption per image this way (`drop_duplicates(subset=["image_id"],
    keep="first")` over Karpathy's train captions)."""
    seen: set = set()
    for item in items:
        image = item.meta.get("image_id")
        if image not in seen:
            seen.add(image)
            yield item


def _select(exclusion: Exclusion, one_caption_per_image: bool):
    keep = exclusion_filter(exclusion)
    if not one_caption_per_image:
        return keep
    return lambda items: keep(first_caption_per_image(items))


def exclusion_filter(exclusion: Exclusion):
    """A `run_generate` `select`: caption items whose COCO image is not excluded."""
    return lambda items: (it for it in items if exclusion.keeps(it.meta.get("coco_id")))


def exclusion_record(exclusion: Exclusion, source: str | Path,
                     splits: Optional[list[str]]) -> dict[str, Any]:
    """The manifest keys for `source` (its images and the captions the exclusion dropped)."""
    input_ids, dropped = set(), 0
    for item in read_items(source):
        if splits and item.meta.get("split") not in splits:
            continue
        coco_id = item.meta.get("coco_id")
        if coco_id is not None:
            input_ids.add(int(coco_id))
        dropped += not exclusion.keeps(coco_id)
    return exclusion.manifest_keys(input_ids, dropped)


def _say(enabled: bool, message: str) -> None:
    if enabled:
        print(message, file=sys.stderr, flush=True)


def _report(enabled: bool, directory: Path, manifest: dict) -> None:
    skipped: dict[str, int] = {}
    for shard in manifest["shards"]:
        for reason, count in shard["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + count
    samples = sum(s["samples"] for s in manifest["shards"])
    _say(enabled, f"prepare coco: {directory}: {samples} samples, skipped {skipped or 'none'}")
