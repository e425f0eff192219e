"""Random access to the samples of a shard set: the byte range of each sample in its tar shard.

`SampleIndex.load(directory)` gives, for sample i of the set (in shard order), its shard, the
byte range that holds all its tar members (the writer puts a sample's members next to each
other), the id of its source image (`trainer.compose.image_key`) and the kinds of its hard
negatives. `read(i)` returns the raw webdataset-style sample with one seek, so an epoch can visit
the samples in any order: the exact-pass epochs of `trainer.exact`.

Building the index reads every tar header and each sample's small `json` / `neg.json` members
(no image is decoded). It is cached as `sample_index.npz` in the set's folder, keyed by the
manifest's shard hashes, so a rewritten set is indexed again; a read-only folder is indexed in
memory at every start.
"""
from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from compclip.shardset.shards import read_manifest
from compclip.fileio import atomic_write
from compclip.trainer.compose import image_key, negative_allowed, stable_id

CACHE = "sample_index.npz"
BLOCK = 512


def _manifest_digest(manifest: dict) -> str:
    digest = hashlib.sha256()
    for shard in manifest["shards"]:
        digest.update(f"{shard['name']}:{shard.get('sha256', '')}:{shard['samples']}\n".encode())
    return digest.hexdigest()


@dataclass
class SampleIndex:
    directory: Path
    shards: list[str]  # shard file names
    shard: np.ndarray  # [N] int32: shard of each sample
    offset: np.ndarray  # [N] int64: first byte of the sample's first member header
    size: np.ndarray  # [N] int64: bytes through the end of its last member
    group: np.ndarray  # [N] int64: stable id of the source image
    neg_start: np.ndarray  # [N + 1] int64: negatives of sample i are neg_code[neg_start[i]:neg_start[i+1]]
    neg_code: np.ndarray  # int16 codes into neg_vocab
    neg_vocab: list[str]  # "kind:subkind"

    def __len__(self) -> int:
        return int(self.shard.shape[0])

    # --- building -----------------------------------------------------------------------------
    @classmethod
    def load(cls, directory: str | Path, progress: bool = False) -> "SampleIndex":
        directory = Path(directory)
        manifest = read_manifest(directory)
        digest = _manifest_digest(manifest)
        cache = directory / CACHE
        if cache.is_file():
            try:
                with np.load(cache) as data:
                    if str(data["digest"]) == digest:
                        return cls(directory, [str(s) for s in data["shards"]], data["shard"], data["offset"],
                                   data["size"], data["group"], data["neg_start"], data["neg_code"],
                                   [str(v) for v in data["neg_vocab"]])
            except (OSError, KeyError, ValueError):
                pass  # a torn or old cache: build again
        index = cls.build(directory, manifest, progress)
        try:
            atomic_write(cache, lambda f: np.savez(
                f, digest=np.array(digest), shards=np.array(index.shards), shard=index.shard,
                offset=index.offset, size=index.size, group=index.group, neg_start=index.neg_start,
                neg_code=index.neg_code, neg_vocab=np.array(index.neg_vocab, dtype=str)))
        except OSError:
            pass  # read-only set: keep the index in memory
        return index

    @classmethod
    def build(cls, directory: Path, manifest: dict, progress: bool = False) -> "SampleIndex":
        shards = [s["name"] for s in manifest["shards"]]
        rows: list[tuple[int, int, int, int]] = []
        neg_start, neg_code, vocab = [0], [], {}
        for n, name in enumerate(shards):
            if progress:
                print(f"indexing {directory}: shard {n + 1}/{len(shards)}", file=sys.stderr, flush=True)
            current: Optional[dict[str, Any]] = None

            def close(sample: Optional[dict]) -> None:
                if sample is None:
                    return
                meta = sample.get("meta") or {}
                rows.append((n, sample["start"], sample["end"] - sample["start"],
                             stable_id(image_key(meta, sample["key"]))))
                for neg in sample.get("negs") or []:
                    code = vocab.setdefault(f"{neg.get('kind')}:{neg.get('subkind')}", len(vocab))
                    neg_code.append(code)
                neg_start.append(len(neg_code))

            with tarfile.open(directory / name, "r") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    key, _, ext = Path(member.name).name.partition(".")
                    if current is None or current["key"] != key:
                        close(current)
                        current = {"key": key, "start": member.offset}
                    current["end"] = member.offset_data + -(-member.size // BLOCK) * BLOCK
                    if ext in ("json", "neg.json"):
                        try:
                            value = json.loads(tar.extractfile(member).read())
                        except ValueError:
                            value = None  # the composer reports the broken sample when it reads it
                        current["meta" if ext == "json" else "negs"] = value if isinstance(
                            value, (dict if ext == "json" else list)) else None
                close(current)
        arr = np.array(rows, dtype=np.int64).reshape(-1, 4)
        return cls(directory, shards, arr[:, 0].astype(np.int32), arr[:, 1], arr[:, 2], arr[:, 3],
                   np.array(neg_start, dtype=np.int64), np.array(neg_code, dtype=np.int16),
                   sorted(vocab, key=vocab.get))

    # --- reading --------------------------------------------------------------------------------
    def eligible_negatives(self, kinds, subkinds) -> np.ndarray:
        """[N] number of each sample's negatives of the given kinds / sub-kinds."""
        ok = np.array([negative_allowed(*v.split(":", 1), kinds, subkinds) for v in self.neg_vocab] or [False])
        hits = ok[self.neg_code].astype(np.int64) if self.neg_code.size else np.zeros(0, dtype=np.int64)
        cumulative = np.concatenate([[0], np.cumsum(hits)])
        return cumulative[self.neg_start[1:]] - cumulative[self.neg_start[:-1]]

    def url(self, i: int) -> str:
        return str(self.directory / self.shards[int(self.shard[i])])

    def read(self, i: int, handles: dict) -> dict[str, Any]:
        """The raw sample i (`{"__key__", "__url__", member: bytes}`); `handles` caches open files."""
        url = self.url(i)
        handle = handles.get(url)
        if handle is None:
            handle = handles[url] = open(url, "rb")
        handle.seek(int(self.offset[i]))
        data = handle.read(int(self.size[i]))
        raw: dict[str, Any] = {"__url__": url}
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if member.isfile():
                    key, _, ext = Path(member.name).name.partition(".")
                    raw.setdefault("__key__", key)
                    raw[ext] = tar.extractfile(member).read()
        return raw
