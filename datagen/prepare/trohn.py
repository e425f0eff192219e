"""TROHN-Text / TROHN-Img (the BiVLC paper's training sets) -> a shard set.

    prepare_trohn("imirandam/TROHN-Text", "data/shards/trohn_text", "data/coco/train2017",
                  TrohnOptions(seed=0))

Sources (Hugging Face dataset cards, read 2026; see docs/data_prep.md):

| dataset                 | columns                                                   | rows (train / validation) |
|-------------------------|-----------------------------------------------------------|---------------------------|
| `imirandam/TROHN-Text`  | `image_id` (COCO 2017 train file name, e.g. `000000391979.jpg`), `caption`, `negative_caption` | 2,922,276 / 730,570 |
| `imirandam/TROHN-Img`   | the same plus `negative_image` (an SD-XL image of the negative caption) | 236,856 / 59,214 |

`dataset` may be a hub id (`datasets.load_dataset(id, split=split)`), an already loaded
`datasets.Dataset` / `DatasetDict`, a `save_to_disk` folder, a local clone of the hub repository,
or a `.parquet` file. A clone's or a `.parquet` file's rows are read from exactly the split's
parquet files (`local_parquet_files`), never from a cache keyed by the folder's name; the local
files a set is read from (parquet, or a `save_to_disk` folder's arrow files) go into the
manifest's `inputs` with their sha256 (`compclip.shardset.shards.pin_inputs`), and a resume whose files
changed is refused in one line. A git-lfs pointer file is refused naming it. The anchor image is `<images_root>/<image_id>` (COCO train2017 is not in the
datasets). Neither dataset labels its negatives, so each gets a schema label from the
dataset's `type` / `subtype` columns when it has them (BiVLC-style), else an inferred one
(`datagen.prepare.labels`), or a fixed `kind:subkind` given by the caller.

- **TROHN-Text**: by default rows with the same (image_id, caption) are grouped into one sample
  whose `neg.json` holds all their negatives (the dataset has one row per negative type, so a
  caption appears in up to 7 rows; grouping keeps one copy of the image and lets the trainer
  draw among the negatives). `group=False` writes one sample per row.
- **TROHN-Img**: one sample per row: `neg.json` = the negative caption, and the partner pair
  (kind `generated`, `negative_index` 0) = the negative image with the negative caption. Image
  bytes are copied as stored in the dataset (no re-encode, unless `max_side`).

Keys are `trohntext<row>` / `trohnimg<row>` (the first row of a group), so they are stable for a
given dataset revision. A missing COCO image or a missing negative image raises an error
naming the dataset row and image id, or with `skip_missing` is skipped and counted
(`missing_image`, `corrupt_image`, `missing_negative_image`). Rows without a usable negative
(empty, or equal to the caption after `normalise`) are skipped and counted (`no_negative`).
The writer resumes after its last complete shard (units are skipped, not re-read); each shard
records its units' counts (`counts`), so `prepare_stats.json` (units, samples, skips, labels,
dropped negatives) covers the whole set after a resume.

Units (rows, or groups) are written in a seeded global order (`compclip.shardset.order.permutation` over
the units kept, seed `seed`; read back by random access), so the captions and negatives of one
image are not neighbours. Each sample's `json` has `image_id` (the COCO file name) and `coco_id`
(int). Units whose COCO image a scored benchmark uses are left out (`datagen.prepare.exclude`;
TROHN's images are train2017, which VISLA-Spatial, ARO's VG part and Karpathy test partly use)
unless `keep_benchmark_images`; the manifest records `excluded` / `exclusion`, and
`image_ids.txt` the COCO ids kept.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from compclip.datagen.negatives.captions_io import coco_id_of_file
from compclip.shardset.imageio import BadImage
from compclip.shardset.order import permutation, shuffled_order
from compclip.datagen.prepare.exclude import DEFAULT_BENCHMARKS_ROOT, benchmark_exclusion, pin_exclusion
from compclip.datagen.negatives.base import normalise
from compclip.datagen.prepare.imagefiles import (SKIP_CORRUPT, SKIP_MISSING, ImageFiles, MissingImage,
                                        image_bytes)
from compclip.shardset.schema import SUBKINDS, Negative, Partner, SchemaError, ShardSample
from compclip.shardset.shards import ShardSetWriter, grouped, pin_inputs, summed_counts
from compclip.errors import CompclipError

REQUIRED = ("image_id", "caption", "negative_caption")
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"  # how a git-lfs pointer file starts
STATS_FILE = "prepare_stats.json"


class RowError(CompclipError, ValueError):
    """A dataset row that cannot be written; the message names the dataset and row."""


def load_rows(dataset: Any, split: str = "train", revision: Optional[str] = None):
    """A `datasets.Dataset` from any of the forms listed in the module docstring, and the local
    files it was read from (parquet files, or a `save_to_disk` folder's arrow files; none for a
    hub id or a loaded dataset). A local clone's or a `.parquet` file's rows are read from
    exactly those files (`local_parquet_files`), never from a cache keyed by a folder name."""
    import datasets
    files: list[Path] = []
    if isinstance(dataset, (datasets.Dataset, datasets.DatasetDict)):
        ds = dataset
    else:
        path = Path(str(dataset))
        if path.is_dir() and any((path / f).is_file() for f in ("dataset_dict.json", "state.json")):
            ds = datasets.load_from_disk(str(path))
            parts = ds.values() if isinstance(ds, datasets.DatasetDict) else [ds]
            files = sorted({Path(f["filename"]) for part in parts for f in part.cache_files})
        elif path.exists():  # a .parquet file, or a local clone of the hub repository
            files = local_parquet_files(path, split)
            ds = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train")
        else:  # a hub id
            ds = datasets.load_dataset(str(dataset), split=split, revision=revision)
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise RowError(f"{dataset}: no split '{split}' (has {', '.join(ds)})")
        ds = ds[split]
    missing = [c for c in REQUIRED if c not in ds.column_names]
    if missing:
        raise RowError(f"{dataset}: missing column(s) {', '.join(missing)} (has "
                       f"{', '.join(ds.column_names)}); expected TROHN-Text/-Img columns "
                       f"{', '.join(REQUIRED)}[, negative_image]")
    return ds, files


def local_parquet_files(path: Path, split: str) -> list[Path]:
    """The parquet files of `split`: `path` itself when it is a file, else those of a local clone
    of a hub dataset repository: the split's `data_files` in the README's `configs` (the
    `default` config, or the first), or else the hub's default layout (`data/<split>-*`, ...,
    as `datasets.data_files.get_data_patterns` finds them). A git-lfs pointer file (a clone made
    without `git lfs pull`) is refused naming the file."""
    if path.is_file():
        files = [path]
    else:
        patterns = _readme_patterns(path, split)
        if patterns is None:
            from datasets.data_files import get_data_patterns
            try:
                patterns = get_data_patterns(str(path)).get(split, [])
            except Exception:  # noqa: BLE001 -- datasets' EmptyDatasetError and kin: no data files
                patterns = []
        files = sorted({f for pattern in patterns for f in path.glob(pattern) if f.is_file()})
        if not files:
            raise RowError(f"{path}: no data files of split '{split}' in this folder; give a "
                           "local clone of the dataset repository, a save_to_disk folder or a .parquet file")
    for f in files:
        if f.suffix != ".parquet":
            raise RowError(f"{f}: not a .parquet file; prepare trohn reads a local clone's parquet files")
        with open(f, "rb") as handle:
            if handle.read(len(LFS_POINTER)) == LFS_POINTER:
                raise RowError(f"{f}: a git-lfs pointer, not the data; run git lfs pull in the "
                               "clone, then rerun")
    return files


def _readme_patterns(folder: Path, split: str) -> Optional[list[str]]:
    """The `path` patterns of `split` in README.md's YAML `configs`, or None when it has none."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    import yaml
    text = readme.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    try:
        card = yaml.safe_load(text.split("---", 2)[1]) or {}
    except (yaml.YAMLError, IndexError):
        raise RowError(f"{readme}: its YAML header cannot be read") from None
    configs = card.get("configs") if isinstance(card, dict) else None
    if not configs:
        return None
    config = next((c for c in configs if c.get("config_name") == "default"), configs[0])
    for entry in config.get("data_files") or []:
        if isinstance(entry, dict) and entry.get("split") == split:
            paths = entry.get("path")
            return [paths] if isinstance(paths, str) else list(paths or [])
    return []


def image_file(image_id: Any) -> str:
    """COCO file name for an image id: TROHN gives `000000391979.jpg`; bare numbers are padded."""
    text = str(image_id).strip()
    if text.isdigit():
        return f"{int(text):012d}.jpg"
    return text


class Units:
    """The input items, in order: one row each, or one group of rows sharing (image, caption)."""

    def __init__(self, ds, group: bool, batch: int = 10_000):
        self.n_rows = len(ds)
        self.group = group
        if not group:
            return
        hashes = np.empty(self.n_rows, np.uint64)
        i = 0
        for chunk in ds.select_columns(["image_id", "caption"]).iter(batch_size=batch):
            for image_id, caption in zip(chunk["image_id"], chunk["caption"]):
                key = f"{image_file(image_id)}\0{str(caption).strip()}".encode("utf-8")
                hashes[i] = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
                i += 1
        _, first, inverse, counts = np.unique(hashes, return_index=True, return_inverse=True,
                                              return_counts=True)
        self._order = np.argsort(first, kind="stable")  # groups by first appearance
        self._rows = np.argsort(inverse.reshape(-1), kind="stable")  # rows grouped, ascending
        self._starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self._counts = counts

    def __len__(self) -> int:
        return len(self._order) if self.group else self.n_rows

    def first_rows(self) -> np.ndarray:
        """The first dataset row of every unit (its image and caption), in unit order."""
        if not self.group:
            return np.arange(self.n_rows)
        return self._rows[self._starts[self._order]]

    def rows(self, unit: int) -> list[int]:
        if not self.group:
            return [unit]
        g = self._order[unit]
        start = self._starts[g]
        return [int(r) for r in self._rows[start:start + self._counts[g]]]


def _unit_coco_ids(ds, units: Units, batch: int = 100_000) -> np.ndarray:
    """The COCO id of every unit's image (-1 when its file name is not a COCO name)."""
    row_ids = np.empty(len(ds), np.int64)
    i = 0
    for chunk in ds.select_columns(["image_id"]).iter(batch_size=batch):
        for image_id in chunk["image_id"]:
            coco_id = coco_id_of_file(image_file(image_id))
            row_ids[i] = -1 if coco_id is None else coco_id
            i += 1
    return row_ids[units.first_rows()]


def _label_mode(ds, label: str) -> str:
    if label == "auto":
        return "dataset" if {"type", "subtype"} <= set(ds.column_names) else "inferred"
    if label == "infer":
        return "inferred"
    if label == "dataset":
        if not {"type", "subtype"} <= set(ds.column_names):
            raise RowError("label 'dataset' needs columns type and subtype")
        return "dataset"
    kind, _, sub = label.partition(":")
    Negative("x", kind, sub)  # SchemaError names a bad label
    return "fixed"


@dataclass
class TrohnOptions:
    """What `prepare_trohn` does; `python -m datagen prepare trohn` builds one.

    `split`, `revision`: the dataset's (`load_rows`); `name`: the dataset in messages and the
    manifest (default: `dataset` when it is a path or id). `group`: one sample per (image,
    caption) (default: yes for TROHN-Text, no for TROHN-Img); `label`: "auto", "infer",
    "dataset" or a fixed "kind:subkind"; `labeller` replaces `PairLabeller()` (for tests).
    `skip_missing`: missing or unreadable images are skipped and counted instead of stopping;
    `max_side`: images larger than this are re-encoded. `shard_size`, `max_bytes`: per shard at
    most; `limit`: units written at most; `chunk`: units read per batch; `seed`: the write
    order. `benchmarks_root`, `keep_benchmark_images`, `karpathy_ref`, `val2017`: the images
    left out (`datagen.prepare.exclude`). `progress`: messages and a bar on stderr."""
    split: str = "train"
    name: Optional[str] = None
    revision: Optional[str] = None
    group: Optional[bool] = None
    label: str = "auto"
    skip_missing: bool = False
    max_side: Optional[int] = None
    shard_size: int = 10_000
    max_bytes: int = 1 << 30
    limit: Optional[int] = None
    chunk: int = 512
    progress: bool = True
    labeller: Any = None
    seed: int = 0
    benchmarks_root: Optional[str | Path] = DEFAULT_BENCHMARKS_ROOT
    keep_benchmark_images: bool = False
    karpathy_ref: Optional[str | Path] = None
    val2017: Optional[str | Path] = None


def prepare_trohn(dataset: Any, out_dir: str | Path, images_root: str | Path,
                  options: Optional[TrohnOptions] = None) -> dict[str, Any]:
    """Write TROHN-Text or TROHN-Img rows as a shard set, as `options` say (`TrohnOptions`; the
    defaults without); returns the manifest."""
    o = options or TrohnOptions()
    import datasets
    ds, files = load_rows(dataset, o.split, o.revision)
    name = o.name or (str(dataset) if isinstance(dataset, (str, Path)) else "dataset")
    flavour = "img" if "negative_image" in ds.column_names else "text"
    if flavour == "img" and isinstance(ds.features.get("negative_image"), datasets.Image):
        ds = ds.cast_column("negative_image", datasets.Image(decode=False))  # keep stored bytes
    group = (flavour == "text") if o.group is None else o.group
    if group and flavour == "img":
        raise RowError(f"{name}: TROHN-Img rows each carry their own negative image; they cannot "
                       "be grouped (one partner per sample)")
    mode = _label_mode(ds, o.label)
    labeller = o.labeller
    if mode == "inferred" and labeller is None:
        from compclip.datagen.prepare.labels import PairLabeller
        labeller = PairLabeller()
    images = ImageFiles(images_root, o.max_side)
    units = Units(ds, group)
    exclusion = benchmark_exclusion(o.benchmarks_root, karpathy=o.karpathy_ref, val2017=o.val2017,
                                    keep=o.keep_benchmark_images)
    pin_exclusion(out_dir, exclusion)
    unit_ids = _unit_coco_ids(ds, units)
    kept = np.array([u for u, c in enumerate(unit_ids) if exclusion.keeps(c if c >= 0 else None)],
                    np.int64)
    positions = kept[permutation(len(kept), o.seed)]
    total = min(len(positions), o.limit) if o.limit is not None else len(positions)
    features = {"negatives": f"trohn-{flavour}", "labels": mode, "images": True, "grouped": group}
    if flavour == "img":
        features["partner"] = "generated"
    pin_inputs(out_dir, files)  # their sha256 in the manifest; a resume with other files is refused
    writer = ShardSetWriter(out_dir, max_count=o.shard_size, max_bytes=o.max_bytes, features=features,
                            order=shuffled_order(o.seed))
    if writer.manifest.get("complete"):
        return writer.manifest
    writer.manifest["source"] = {"dataset": name, "split": o.split, "rows": len(ds), "units": total}
    excluded = exclusion.manifest_keys({int(c) for c in unit_ids if c >= 0},
                                       len(unit_ids) - len(kept))
    writer.manifest.update(excluded)
    if o.progress:
        print(f"prepare trohn: {exclusion.summary(excluded)}", file=sys.stderr)
    done = writer.inputs_done
    run: Counter[str] = Counter()  # this run's counts; the writer keeps each shard's (`_count`)
    bar = _progress(o.progress, done, total, f"trohn-{flavour}")
    prefix = f"trohn{flavour}"
    t0 = time.perf_counter()
    try:
        for start in range(done, total, o.chunk):
            unit_rows = [units.rows(int(positions[p]))
                         for p in range(start, min(start + o.chunk, total))]
            flat = [r for rows in unit_rows for r in rows]
            batch = ds[flat]
            records = {r: {c: batch[c][i] for c in batch} for i, r in enumerate(flat)}
            labels = _labels(records, mode, o.label, labeller, name)
            for rows in unit_rows:
                _write_unit(writer, rows, records, labels, images, flavour, prefix, name,
                            mode, o, run)
            if bar is not None:
                bar.update(len(unit_rows))
    except BaseException as err:  # complete shards and the manifest stay; the partial one goes
        writer.__exit__(type(err), err, None)
        raise
    finally:
        if bar is not None:
            bar.close()
    seconds = round(time.perf_counter() - t0, 3)
    manifest = writer.close()
    whole, unrecorded = summed_counts(manifest)
    stats = {"units": whole["units"], "samples": whole["samples"],
             "dropped_negatives": whole["dropped_negatives"],
             "skipped": grouped(whole, "skipped:"), "labels": grouped(whole, "labels:"),
             "seconds": seconds, "resumed_from": done}
    if unrecorded:  # shards of an older version record no counts: the report leaves them out
        stats["shards_without_counts"] = unrecorded
    (Path(out_dir) / STATS_FILE).write_text(json.dumps(stats, indent=1, sort_keys=True))
    if o.progress:
        print(f"prepare trohn: {run['samples']} samples written this run, skipped "
              f"{grouped(run, 'skipped:') or 'none'}", file=sys.stderr)
    return manifest



def _labels(records: dict[int, dict], mode: str, label: str, labeller,
            name: str) -> dict[int, tuple[str, str]]:
    """(kind, subkind) per row with a usable negative."""
    usable = {r: rec for r, rec in records.items() if _negative_text(rec)}
    if mode == "fixed":
        kind, _, sub = label.partition(":")
        return {r: (kind, sub) for r in usable}
    if mode == "dataset":
        out = {}
        for r, rec in usable.items():
            kind, sub = str(rec["type"]).strip().lower(), str(rec["subtype"]).strip().lower()
            if kind not in SUBKINDS or sub not in SUBKINDS[kind]:
                known = ", ".join(f"{k}:{s}" for k in SUBKINDS for s in SUBKINDS[k])
                raise RowError(f"{name} row {r}: type/subtype '{rec['type']}'/'{rec['subtype']}' "
                               f"is not a schema label ({known})")
            out[r] = (kind, sub)
        return out
    rows = list(usable)
    pairs = [(str(usable[r]["caption"]), _negative_text(usable[r])) for r in rows]
    return dict(zip(rows, labeller(pairs)))


def _negative_text(rec: dict) -> str:
    neg = str(rec.get("negative_caption") or "").strip()
    return neg if neg and normalise(neg) != normalise(str(rec.get("caption") or "")) else ""


def _write_unit(writer: ShardSetWriter, rows: list[int], records: dict[int, dict],
                labels: dict[int, tuple[str, str]], images: ImageFiles, flavour: str, prefix: str,
                name: str, mode: str, o: TrohnOptions, run: Counter) -> None:
    """Write one unit's sample (`o.split`, `o.skip_missing`, `o.max_side`), or skip it, counting it (`units`, `samples` or
    `skipped:<reason>`, `labels:<kind>:<subkind>`, `dropped_negatives`) in `run` and in the
    writer's counts of its shard (`_count`)."""
    first = records[rows[0]]
    caption = str(first["caption"] or "").strip()
    image_id = first["image_id"]
    rel = image_file(image_id)
    where = f"{name} row {rows[0]}, image_id '{image_id}'"
    negatives, seen = [], set()
    counts: Counter[str] = Counter({"units": 1})
    for r in rows:
        text = _negative_text(records[r])
        if not text:
            counts["dropped_negatives"] += 1
            continue
        if text in seen:
            continue
        seen.add(text)
        kind, sub = labels[r]
        negatives.append(Negative(text, kind, sub, f"trohn-{flavour}"))
    if not caption or not negatives:
        _skip(writer, run, counts, "no_negative")
        return
    try:
        image, ext = images.load(rel, where)
        partner = _partner(first, negatives[0].text, where, o.max_side) if flavour == "img" else None
    except (MissingImage, BadImage, RowError) as err:
        if not o.skip_missing:
            raise
        _skip(writer, run, counts, SKIP_MISSING if isinstance(err, MissingImage) else
              "missing_negative_image" if isinstance(err, RowError) else SKIP_CORRUPT)
        return
    meta = {"source": name, "split": o.split, "image_id": str(image_id), "image_path": rel,
            "negative_labels": mode}
    coco_id = coco_id_of_file(rel)
    if coco_id is not None:
        meta["coco_id"] = coco_id
    if flavour == "text":
        meta["rows"] = rows
    else:
        meta["row"] = rows[0]
    counts["samples"] += 1
    counts.update(f"labels:{n.kind}:{n.subkind}" for n in negatives)
    _count(writer, run, counts)
    try:
        writer.add(ShardSample(f"{prefix}{rows[0]:09d}", caption, image, ext, meta, negatives, partner))
    except SchemaError as err:
        raise RowError(f"{where}: {err}") from None


def _skip(writer: ShardSetWriter, run: Counter, counts: Counter, reason: str) -> None:
    counts[f"skipped:{reason}"] += 1
    _count(writer, run, counts)
    writer.skip(reason)


def _count(writer: ShardSetWriter, run: Counter, counts: Counter) -> None:
    """Add a unit's counts to the run's and to the shard's it goes to (before it goes: its
    sample may finish the shard)."""
    run.update(counts)
    writer.counts.update(counts)


def _partner(rec: dict, caption: str, where: str, max_side: Optional[int]) -> Partner:
    value = rec.get("negative_image")
    data = None
    if isinstance(value, dict):
        data = value.get("bytes")
        if not data and value.get("path") and Path(value["path"]).is_file():
            data = Path(value["path"]).read_bytes()
    elif isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    elif value is not None and hasattr(value, "save"):  # a decoded PIL image
        from compclip.shardset.imageio import encode_image
        data = encode_image(value, "png")
    if not data:
        raise RowError(f"{where}: negative_image is empty")
    data, ext = image_bytes(data, f"{where} negative_image", max_side)
    return Partner(image=data, caption=caption, kind="generated", image_ext=ext, negative_index=0)


def _progress(enabled: bool, initial: int, total: int, desc: str):
    if not enabled:
        return None
    from compclip.cli import progress
    return progress(initial=initial, total=total, unit="sample", unit_scale=True, desc=desc)
