"""A shard set rewritten in a seeded global random order, in bounded memory (two passes).

    shuffle_shard_set("data/shards/big", "data/shards/big_shuffled", seed=0, buckets=64)
    python -m datagen shuffle --src SRC --out OUT --seed 0 [--buckets N]

For a set too large to hold in memory. Pass 1 reads every sample of SRC once, in order, and
appends its raw members (bytes untouched) to one of N temporary bucket tar files under the work
folder (default `OUT/.shuffle`), chosen by a seeded random draw per sample; the buckets are
written member by member (`compclip.shardset.tarblocks`), keeping nothing per member, so memory
does not grow with the set (`tests/test_shuffle_scale.py`). Samples need no image (text-only sets
shuffle). Pass 2 takes one bucket at a time: it lists each sample's byte range from the
bucket's headers, draws an order with a generator seeded by (seed, bucket), reads the samples in
that order one range at a time and writes them through `ShardSetWriter` without checking them
again, so memory holds two offsets per sample of one bucket, not its samples
(`tests/test_shuffle_scale.py`). On a set `ShardSetWriter` wrote, neither
pass nor the final check makes a `tarfile` object per member: headers are read and written as
bytes (`tests/test_shuffle_scale.py`). Uniform bucket choice followed by a uniform shuffle of
each bucket gives a uniformly random permutation of the whole set, reproducible from the seed and
N (the default N aims at `BUCKET_BYTES` per bucket); disk holds one extra copy of SRC while it
runs (the buckets are deleted at the end).

Pass 1 checks every sample against the shard schema, so a bad one (e.g. a caption that is not
UTF-8) stops the run with one line naming the sample and its shard in SRC. Resumable: a
finished pass 1 is recorded in `<work>/buckets.json` (seed, N, SRC's shard hashes) and reused;
pass 2 resumes after the last complete output shard (the writer's `inputs_done` positions of the
same order are skipped). A resume with another seed or N is refused in one line.
The output manifest records `"order": {"shuffled": true, "seed": S, "method": "buckets",
"buckets": N, "source": SRC}`, SRC's `features` and record of excluded benchmark images, and
`shuffle` (samples, largest bucket); `image_ids.txt` is written anew. `check_output` is the
command's final check: each output shard's size and sample count against the manifest, from its
tar headers alone (payloads are skipped, not read; the manifest's sha256 is of the bytes as the
writer wrote them).
"""
from __future__ import annotations

import itertools
from array import array
import json
import math
import shutil
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from compclip.shardset.order import rng, shuffled_order
from compclip.shardset.schema import SchemaError, ShardSample
from compclip.shardset.shards import (CARRIED_KEYS, ShardSetWriter, iter_raw_samples, listed_shard,
                                      member_key, read_manifest, shard_urls)
from compclip.shardset.tarblocks import TarWriter, iter_members, iter_spans, read_span
from compclip.fileio import atomic_write

BUCKET_BYTES = 256 << 20
BUCKETS_FILE = "buckets.json"


def default_buckets(manifest: dict[str, Any], bucket_bytes: int = BUCKET_BYTES) -> int:
    total = sum(s.get("bytes", 0) for s in manifest["shards"])
    return max(1, math.ceil(total / bucket_bytes))


def _bucket_path(work: Path, b: int) -> Path:
    return work / f"bucket-{b:05d}.tar"


def scatter(src: str | Path, work: Path, seed: int, buckets: int, progress: bool = True) -> list[int]:
    """Pass 1: every sample of `src` into one of `buckets` tar files; returns samples per bucket."""
    manifest = read_manifest(src)
    done = work / BUCKETS_FILE
    stamp = {"seed": seed, "buckets": buckets, "sources": [s["sha256"] for s in manifest["shards"]]}
    if done.is_file():
        info = json.loads(done.read_text())
        if {k: info.get(k) for k in stamp} == stamp:
            return info["counts"]
    work.mkdir(parents=True, exist_ok=True)
    draw = rng(seed, "shuffle-buckets")
    files = [TarWriter(_bucket_path(work, b), hashed=False) for b in range(buckets)]
    counts = [0] * buckets
    total = sum(s["samples"] for s in manifest["shards"])
    bar = _bar(progress, total, "shuffle pass 1")
    try:
        for url in shard_urls(src):
            for raw in iter_raw_samples(url):
                ShardSample.from_wds(raw, require_image=False)  # a bad sample is named here, by its shard
                b = int(draw.integers(buckets))
                for member, value in raw.items():
                    if not member.startswith("__"):
                        files[b].add(f"{raw['__key__']}.{member}", value)
                counts[b] += 1
                if bar is not None:
                    bar.update(1)
    finally:
        for file in files:
            file.close()
        if bar is not None:
            bar.close()
    atomic_write(done, lambda f: json.dump({**stamp, "counts": counts}, f), "w")
    return counts


def sample_spans(path: Path) -> np.ndarray:
    """(start, end) byte range of each sample of a bucket file, in file order, from its headers."""
    starts, ends, last = array("q"), array("q"), None  # 16 bytes a sample, no object per sample
    for name, offset, size in iter_spans(path):
        key = member_key(name)[0]
        if key != last:
            starts.append(offset)
            ends.append(offset)
            last = key
        ends[-1] = offset + size
    return np.stack([np.frombuffer(starts, np.int64), np.frombuffer(ends, np.int64)], axis=1)


def bucket_in_order(path: Path, order: np.ndarray) -> Iterator[dict[str, Any]]:
    """The raw samples of a bucket file at positions `order` (a permutation of its samples), each
    read from its byte range."""
    spans = sample_spans(path)
    if len(spans) != len(order):
        raise ValueError(f"{path}: {len(spans)} samples, expected {len(order)}; delete "
                         f"{path.parent} and rerun")
    with open(path, "rb") as f:
        for i in order:
            raw: dict[str, Any] = {}
            for name, value in read_span(f, int(spans[i, 0]), int(spans[i, 1])):
                key, ext = member_key(name)
                raw.setdefault("__key__", key)
                raw[ext] = value
            yield raw


def shuffle_shard_set(src: str | Path, out: str | Path, seed: int = 0,
                      buckets: Optional[int] = None, work_dir: Optional[str | Path] = None,
                      max_count: int = 10_000, max_bytes: int = 1 << 30, progress: bool = True) -> dict[str, Any]:
    """Write `src` into `out` in a seeded random order (see the module docstring); returns the
    manifest."""
    src, out = Path(src), Path(out)
    src_manifest = read_manifest(src)
    if not src_manifest.get("complete"):
        raise ValueError(f"{src}: shard set is not complete (finish or resume the run that writes it)")
    if src.resolve() == out.resolve():
        raise ValueError(f"{out}: the output must be another folder than the input; give another --out")
    buckets = buckets or default_buckets(src_manifest)
    if buckets < 1:
        raise ValueError(f"--buckets must be at least 1, not {buckets}")
    work = Path(work_dir) if work_dir else out / ".shuffle"
    order = shuffled_order(seed, method="buckets", buckets=buckets, source=str(src))
    writer = ShardSetWriter(out, max_count=max_count, max_bytes=max_bytes,
                            features=src_manifest.get("features") or None, order=order)
    if writer.manifest.get("complete"):
        return writer.manifest
    writer.manifest.update({k: src_manifest[k] for k in CARRIED_KEYS if k in src_manifest})
    counts = scatter(src, work, seed, buckets, progress)
    writer.manifest["shuffle"] = {"samples": sum(counts), "buckets": buckets,
                                  "largest_bucket": max(counts)}
    skip = writer.inputs_done
    bar = _bar(progress, sum(counts), "shuffle pass 2", skip)
    position = 0
    try:
        for b, count in enumerate(counts):
            if position + count <= skip:  # a bucket wholly in complete shards: not even read
                position += count
                continue
            order = rng(seed, f"shuffle-bucket-{b}").permutation(count)
            samples = bucket_in_order(_bucket_path(work, b), order)
            for raw in itertools.islice(samples, max(0, skip - position), None):
                writer.add_raw(raw, checked=True)  # checked in pass 1
                if bar is not None:
                    bar.update(1)
            position += count
    except BaseException as err:  # complete shards stay; the partial one goes
        writer.__exit__(type(err), err, None)
        raise
    finally:
        if bar is not None:
            bar.close()
    manifest = writer.close()
    shutil.rmtree(work, ignore_errors=True)
    return manifest


def check_output(directory: str | Path) -> dict[str, int]:
    """The final check of a shuffled set, from tar headers alone: each shard's size and sample
    count against the manifest (the samples were checked against the schema in pass 1). Raises
    SchemaError naming the shard; returns `{"samples", "shards"}`."""
    manifest = read_manifest(directory)
    totals = {"samples": 0, "shards": 0}
    for entry in manifest["shards"]:
        path = listed_shard(directory, entry, sha256=False)
        count, last = 0, None
        for name, _ in iter_members(path, payloads=False):
            key = member_key(name)[0]
            count += key != last
            last = key
        if count != entry["samples"]:
            raise SchemaError(f"{path}: {count} samples, manifest says {entry['samples']}")
        totals["samples"] += count
        totals["shards"] += 1
    return totals


def _bar(enabled: bool, total: int, desc: str, initial: int = 0):
    if not enabled:
        return None
    from compclip.cli import progress
    return progress(total=total, initial=initial, unit="sample", unit_scale=True, desc=desc)
