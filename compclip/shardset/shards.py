"""Writing, verifying and indexing a shard set (a folder of tar shards plus `manifest.json`).

`ShardSetWriter` is the one way datagen writes shards: count- and size-limited tar shards, each
written under a temporary name (created by its first sample or skip) and renamed when complete,
with `manifest.json` (samples, input items consumed, bytes and sha256 per shard, skip counts by
reason) rewritten atomically after every shard. A killed run resumes from the last complete
shard: the writer reports how many input items are already done (`inputs_done`) and the caller
skips them. For identical output after a resume, the caller must make each sample from its input
item alone (e.g. seed by item index). `order` (a `compclip.shardset.order` record, e.g. `{"shuffled": true,
"seed": 3}`) is stored in the manifest; resuming a set written in another order is refused with
one line. A set that was complete when the writer opened it, and got nothing new, is left
untouched by `close` (a complete set may be read-only). A caller's own counts of the items of
the shard being written (`writer.counts`, a `Counter`, e.g. captions by skip reason) are stored
with that shard (`"counts"`), so a report over the whole set after a resume sums them
(`summed_counts`).

`pin_options` records, when a command starts a set, the options that change what it writes
(`"options": {"--canvas": "224x224", ...}` in the manifest, written before any work); rerunning
into the same folder with another value of one of them is refused in one line naming the option,
both values and the fix (`OptionMismatch`) once a shard is complete (before, the new values
hold: nothing was written). Options a set does not record are not compared; options are
recorded only when a set starts. Its `inputs` argument (and `pin_inputs`) records the same way
the fingerprints of the files or folders the set is made from (`"inputs": {absolute path:
fingerprint}`, `compclip.shardset.fingerprint`: size, mtime_ns and sha256 of a file); a rerun whose input
differs is refused in one line naming the input and what changed (`InputChanged`).
`check_pinned` compares both without writing (a complete set reused as it is).

On `close`, the distinct COCO ids of the set's samples (`meta["coco_id"]` and the list
`meta["coco_ids"]` of an image cut from several, in each `json` member) are written to
`image_ids.txt`, one int per line, named in the manifest as `"image_ids": "image_ids.txt"`, so a
trainer compares training and benchmark images without reading the shards (`read_image_ids`). A set without COCO images gets no such file. The ids of
the samples a writer adds are noted as they go by; only shards complete before it opened (a
resumed run) are read back for theirs.

`verify_shard_set` reads every shard back against the manifest; `KeyIndex` maps a sample key to
the byte range of any of its members, so a reader can fetch a neighbour's image by key.
"""
from __future__ import annotations

import json
import os
import tarfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from compclip.shardset.fingerprint import changed, fingerprint, sha256_file
from compclip.shardset.manifest import MANIFEST, read_manifest
from compclip.shardset.order import ORDER_KEY, check_order
from compclip.shardset.schema import SCHEMA_VERSION, SchemaError, ShardSample
from compclip.shardset.tarblocks import TarWriter, iter_members
from compclip.fileio import atomic_write
from compclip.errors import CompclipError

KEY_INDEX = "keys.tsv"
IMAGE_IDS = "image_ids.txt"
CARRIED_KEYS = ("excluded", "exclusion")  # manifest keys a set rewritten from another inherits
OPTIONS_KEY = "options"
INPUTS_KEY = "inputs"


class OptionMismatch(CompclipError, ValueError):
    """A rerun into an existing output with another value of an option that changes it."""


class InputChanged(CompclipError, ValueError):
    """A rerun into an existing output whose input is not what it was when the output started."""


def is_complete(directory: str | Path) -> bool:
    """Whether `directory` holds a shard set whose writer finished (manifest `complete: true`)."""
    return (Path(directory) / MANIFEST).is_file() and bool(read_manifest(directory).get("complete"))


def shard_urls(directory: str | Path) -> list[str]:
    """The complete shards of a set, in order, as paths webdataset accepts."""
    manifest = read_manifest(directory)
    return [str(Path(directory) / s["name"]) for s in manifest["shards"]]


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "":
        return "(not given)"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def check_options(recorded: dict[str, Any], options: dict[str, Any], where: str | Path) -> None:
    """Raise OptionMismatch on the first option whose value differs from the recorded one."""
    for name, value in options.items():
        if name in recorded and recorded[name] != value:
            raise OptionMismatch(
                f"{where}: this output was started with {name} {_shown(recorded[name])}, this run "
                f"has {name} {_shown(value)}; rerun with the options it was started with "
                f"({name} {_shown(recorded[name])}) or write to a new --out")


def check_inputs(recorded: dict[str, Any], inputs: Iterable[str | Path], where: str | Path) -> None:
    """Raise InputChanged on the first input whose fingerprint differs from the recorded one
    (inputs a set does not record are not compared)."""
    for path in inputs:
        known = recorded.get(_input_key(path))
        what = changed(known, path) if known else None
        if what:
            raise InputChanged(f"{path}: this input changed since {where} was started ({what}); "
                               "rerun with the input as it was, or write to a new --out")


def check_pinned(directory: str | Path, options: dict[str, Any], inputs: Iterable[str | Path] = (),
                 file: str = MANIFEST) -> None:
    """Compare `options` and `inputs` with what `directory/file` records, writing nothing."""
    path = Path(directory) / file
    record = read_manifest(directory) if file == MANIFEST else _read_json(path)
    check_options(record.get(OPTIONS_KEY) or {}, json.loads(json.dumps(options)), path)
    check_inputs(record.get(INPUTS_KEY) or {}, inputs, Path(directory))


def _input_key(path: str | Path) -> str:
    return str(Path(path).resolve())


def pin_options(directory: str | Path, options: dict[str, Any], file: str = MANIFEST,
                inputs: Iterable[str | Path] = ()) -> dict[str, Any]:
    """Record a writer's output-changing `options` and the fingerprints of its `inputs` (files or
    folders, `compclip.shardset.fingerprint`) in `directory/file` (the shard set's manifest, created with no
    shards yet if there is none), or refuse, if it already records other values, with an
    `OptionMismatch` naming the option, both values and the fix, or an `InputChanged` naming the
    input and what changed. A manifest with no complete shard yet takes the new values; a set
    started without a record (by an older version, or through the library) is not given one.
    Returns the options."""
    options = json.loads(json.dumps(options))  # tuples -> lists: compared as stored
    _pin(directory, file, options, inputs)
    return options


def pin_inputs(directory: str | Path, inputs: Iterable[str | Path], file: str = MANIFEST) -> None:
    """`pin_options` for inputs alone: fingerprints added to those recorded when the set starts,
    compared once it has a complete shard; the recorded options are left as they are."""
    _pin(directory, file, None, inputs)


def _pin(directory: str | Path, file: str, options: Optional[dict[str, Any]],
         inputs: Iterable[str | Path]) -> None:
    directory = Path(directory)
    path = directory / file
    inputs = list(inputs)
    if path.is_file():
        record = read_manifest(directory) if file == MANIFEST else _read_json(path)
    elif file == MANIFEST:
        record = {"schema_version": SCHEMA_VERSION, "features": None, "shards": [], "complete": False}
    else:
        record = {}
    started = path.is_file() and (file != MANIFEST or record.get("shards") or record.get("complete"))
    if started:  # compared, never rewritten: a set started without a record stays without one
        check_options(record.get(OPTIONS_KEY) or {}, options or {}, path)
        check_inputs(record.get(INPUTS_KEY) or {}, inputs, directory)
        return
    known = record.get(INPUTS_KEY) or {}  # nothing written yet (or a run stopped before its first shard)
    fingerprints = {_input_key(p): fingerprint(p, known.get(_input_key(p))) for p in inputs}
    if options is not None:
        record[OPTIONS_KEY] = options
        record[INPUTS_KEY] = fingerprints
    elif fingerprints:
        record[INPUTS_KEY] = {**known, **fingerprints}
    else:
        return
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: json.dump(record, f, indent=1), "w")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise SchemaError(f"{path}: not valid JSON ({err}); delete it or write to a new --out") from None
    if not isinstance(value, dict):
        raise SchemaError(f"{path}: not a JSON object; delete it or write to a new --out")
    return value


def check_features(manifest: dict[str, Any], features: Optional[dict[str, Any]], path: str | Path) -> None:
    """Refuse (SchemaError) to add to a set whose manifest records other `features`; a manifest
    with no features and no shards yet (one `pin_options` started) takes any."""
    recorded = manifest.get("features")
    if not recorded and not manifest.get("shards"):
        return
    if features and recorded not in (None, features):
        raise SchemaError(f"{path}: existing shard set has features {recorded}, not {features}")


class ShardSetWriter:
    """Append samples to a shard set; see the module docstring for the resume contract."""

    def __init__(self, directory: str | Path, prefix: str = "shard", max_count: int = 10_000,
                 max_bytes: int = 1 << 30, features: Optional[dict[str, Any]] = None,
                 order: Optional[dict[str, Any]] = None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prefix, self.max_count, self.max_bytes = prefix, max_count, max_bytes
        for stale in self.directory.glob(".*.tar.tmp"):
            stale.unlink()  # a shard a killed run left unfinished
        path = self.directory / MANIFEST
        if path.is_file():
            self.manifest = read_manifest(self.directory)
            check_features(self.manifest, features, path)
            if features and not self.manifest.get("features") and not self.manifest["shards"]:
                self.manifest["features"] = features  # a manifest `pin_options` started
        else:
            self.manifest = {"schema_version": SCHEMA_VERSION, "features": features or {},
                             "shards": [], "complete": False}
        if order is not None:
            check_order(self.manifest, order, path)
            self.manifest[ORDER_KEY] = order
        self._coco_ids: list[int] = []  # COCO ids of the samples this writer added
        self._count_negatives = bool((self.manifest.get("features") or {}).get("negatives"))
        self._earlier = [s["name"] for s in self.manifest["shards"]]  # complete before: read on close
        self._was_complete = bool(self.manifest.get("complete"))
        self.counts: Counter[str] = Counter()  # the caller's counts for the shard being written
        self._tar: Optional[TarWriter] = None
        self._new_shard()

    @property
    def inputs_done(self) -> int:
        """Input items consumed by complete shards: skip this many on resume."""
        return sum(s["inputs"] for s in self.manifest["shards"])

    @property
    def samples_written(self) -> int:
        return sum(s["samples"] for s in self.manifest["shards"]) + self._count

    def _new_shard(self) -> None:
        """Start the next shard; its file is created by its first sample or skip."""
        index = len(self.manifest["shards"])
        self._name = f"{self.prefix}-{index:06d}.tar"
        self._tmp = self.directory / f".{self._name}.tmp"
        self._count = self._inputs = self._bytes = 0
        self._skipped: Counter[str] = Counter()
        self._negatives: Counter[int] = Counter()  # samples by their number of negatives
        self.counts.clear()

    def _open_tar(self) -> TarWriter:
        if self._tar is None:
            self._tar = TarWriter(self._tmp)
        return self._tar

    def _drop_tar(self) -> None:
        """Close and delete the shard being written (not complete)."""
        if self._tar is not None:
            self._tar.close()
            self._tar = None
        self._tmp.unlink(missing_ok=True)

    def add(self, sample: ShardSample, inputs: int = 1) -> None:
        """Write one sample that consumed `inputs` input items."""
        members = {k: v for k, v in sample.to_wds().items() if not k.startswith("__")}
        self._write(sample.key, members, inputs, len(sample.negatives))
        self._note_coco_id(sample.meta)

    def add_raw(self, raw: dict[str, Any], inputs: int = 1,
                extra: Optional[dict[str, bytes]] = None, checked: bool = False) -> None:
        """Copy a raw sample (`iter_raw_samples`) member for member, bytes untouched, with
        `extra` members added or replaced (e.g. `nn.json`); checked against the schema first,
        unless the caller has already done so (`checked`: only the `json` and `neg.json` members
        are decoded, for the manifest's counts). Used to rewrite a shard set without re-encoding
        its images."""
        members = {k: v for k, v in raw.items() if not k.startswith("__")}
        members.update(extra or {})
        key = raw["__key__"]
        if checked:
            meta = json.loads(members["json"]) if "json" in members else {}
            negatives = len(json.loads(members["neg.json"])) \
                if self._count_negatives and "neg.json" in members else 0
        else:
            where = {k: raw[k] for k in ("__key__", "__url__") if k in raw}  # an error names both
            sample = ShardSample.from_wds({**where, **members}, require_image=False)
            meta, negatives = sample.meta, len(sample.negatives)
        self._write(key, members, inputs, negatives)
        self._note_coco_id(meta)

    def _note_coco_id(self, meta: Optional[dict[str, Any]]) -> None:
        """Remember a written sample's COCO ids for `image_ids.txt` (see `close`)."""
        self._coco_ids += coco_ids_of(meta)

    def _write(self, key: str, members: dict[str, bytes], inputs: int, negatives: int = 0) -> None:
        if self._count_negatives:
            self._negatives[negatives] += 1
        tar = self._open_tar()
        for member, value in members.items():
            tar.add(f"{key}.{member}", value)  # nothing kept per member: memory stays flat
            self._bytes += len(value) + 512
        self._count += 1
        self._inputs += inputs
        if self._count >= self.max_count or self._bytes >= self.max_bytes:
            self._finish_shard()

    def skip(self, reason: str, inputs: int = 1) -> None:
        """Record input items that produced no sample (corrupt image, empty caption, ...)."""
        self._open_tar()
        self._skipped[reason] += inputs
        self._inputs += inputs

    def _finish_shard(self) -> None:
        if self._count == 0 and self._inputs == 0:  # nothing written to it
            self._drop_tar()
            return
        size, sha256 = self._tar.close()  # hashed as written: not read back
        self._tar = None
        os.replace(self._tmp, self.directory / self._name)
        entry = {"name": self._name, "samples": self._count, "inputs": self._inputs,
                 "bytes": size, "sha256": sha256, "skipped": dict(self._skipped)}
        if self._count_negatives:
            entry["negatives_per_sample"] = {str(n): c for n, c in sorted(self._negatives.items())}
        if self.counts:
            entry["counts"] = dict(sorted(self.counts.items()))
        self.manifest["shards"].append(entry)
        self._write_manifest()
        self._new_shard()

    def _write_manifest(self) -> None:
        self.manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        atomic_write(self.directory / MANIFEST, lambda f: json.dump(self.manifest, f, indent=1), "w")

    def close(self) -> dict[str, Any]:
        """Finish the last shard and mark the set complete; returns the manifest. A set that was
        complete when the writer opened it and got nothing new is left untouched."""
        if self._was_complete and self._tar is None and len(self.manifest["shards"]) == len(self._earlier):
            return self.manifest
        self._finish_shard()
        earlier = {"shards": [s for s in self.manifest["shards"] if s["name"] in self._earlier]}
        ids = collect_coco_ids(self.directory, earlier) | {int(i) for i in self._coco_ids}
        if ids:
            atomic_write(self.directory / IMAGE_IDS,
                         lambda f: f.writelines(f"{i}\n" for i in sorted(ids)), "w")
            self.manifest["image_ids"] = IMAGE_IDS
        if self._count_negatives:
            self.manifest["negatives_per_sample"] = negatives_per_sample(self.manifest)
        self.manifest["complete"] = True
        self._write_manifest()
        return self.manifest

    def __enter__(self) -> "ShardSetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # keep complete shards, drop the partial one, leave the set resumable
            self._drop_tar()


def negatives_per_sample(manifest: dict[str, Any]) -> dict[str, Any]:
    """The set's samples by their number of hard negatives (`neg.json` entries), summed over
    the shards' records: `{"histogram": {"0": n0, "1": n1, ...}, "mean": m, "with_none": share}`.
    Shards written before the record existed are left out (`shards_counted` says how many
    were counted)."""
    total: Counter[int] = Counter()
    counted = 0
    for shard in manifest.get("shards", []):
        if "negatives_per_sample" in shard:
            counted += 1
            total.update({int(n): c for n, c in shard["negatives_per_sample"].items()})
    samples = sum(total.values())
    return {"histogram": {str(n): c for n, c in sorted(total.items())},
            "mean": round(sum(n * c for n, c in total.items()) / samples, 4) if samples else None,
            "with_none": round(total[0] / samples, 6) if samples else None,
            "shards_counted": counted}


def summed_counts(manifest: dict[str, Any]) -> tuple[Counter, int]:
    """The writer's per-shard `counts` summed over the set's shards, and how many shards have
    no such record (written by an older version)."""
    total: Counter[str] = Counter()
    missing = 0
    for shard in manifest.get("shards", []):
        if "counts" in shard:
            total.update(shard["counts"])
        else:
            missing += 1
    return total, missing


def grouped(counts: Counter, prefix: str) -> dict[str, int]:
    """The counts whose key starts with `prefix` (e.g. `skipped:`), by the rest of the key, sorted."""
    return {k[len(prefix):]: v for k, v in sorted(counts.items()) if k.startswith(prefix)}


def coco_ids_of(meta: Optional[dict[str, Any]]) -> list[int]:
    """The COCO images a sample was made from: `meta["coco_id"]` and the list `meta["coco_ids"]`
    (a stitched image cut from several)."""
    if not meta:
        return []
    ids = [meta["coco_id"]] if meta.get("coco_id") is not None else []
    return [int(i) for i in ids + list(meta.get("coco_ids") or [])]


def member_key(name: str) -> tuple[str, str]:
    """The sample key and member of a tar member `name` (`[folder/]KEY.MEMBER`), as
    `Path(name).name.partition(".")` splits it (without building a Path)."""
    base = name.rpartition("/")[2]
    key, _, ext = (base if base not in ("", ".") else Path(name).name).partition(".")
    return key, ext


def iter_raw_samples(shard: str | Path) -> Iterator[dict[str, Any]]:
    """Group a tar shard's members into raw webdataset-style samples (bytes values), read as
    `tarfile` reads them (`compclip.shardset.tarblocks.iter_members`)."""
    current: dict[str, Any] = {}
    url = str(shard)
    for name, value in iter_members(shard):
        key, ext = member_key(name)
        if current and current["__key__"] != key:
            yield current
            current = {}
        if not current:
            current = {"__key__": key, "__url__": url}
        current[ext] = value
    if current:
        yield current


def collect_coco_ids(directory: str | Path, manifest: Optional[dict] = None) -> set[int]:
    """Distinct `meta["coco_id"]` of a set's complete shards; only `json` members are read."""
    manifest = manifest or read_manifest(directory)
    ids: set[int] = set()
    for entry in manifest["shards"]:
        path = Path(directory) / entry["name"]
        with tarfile.open(path, "r") as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".json") \
                        and member.name.count(".") == 1:  # `<key>.json`, not `neg.json` etc.
                    try:
                        meta = json.loads(tar.extractfile(member).read())
                        ids.update(coco_ids_of(meta))
                    except (ValueError, AttributeError, TypeError):
                        raise SchemaError(f"{path}: member '{member.name}' is not a JSON object") from None
    return ids


def read_image_ids(directory: str | Path) -> Optional[set[int]]:
    """The COCO ids a set's manifest names (`image_ids`), or None when it names none."""
    name = read_manifest(directory).get("image_ids")
    if not name:
        return None
    path = Path(directory) / name
    try:
        return {int(line) for line in path.read_text().split()}
    except (OSError, ValueError) as err:
        raise SchemaError(f"{path}: unreadable image id list ({err})") from None


def update_manifest(directory: str | Path, **keys: Any) -> dict[str, Any]:
    """Set top-level manifest keys (e.g. `excluded`) of a set, atomically; returns the manifest."""
    manifest = read_manifest(directory)
    manifest.update(keys)
    atomic_write(Path(directory) / MANIFEST, lambda f: json.dump(manifest, f, indent=1), "w")
    return manifest


def listed_shard(directory: str | Path, entry: dict, sha256: bool = True) -> Path:
    """The file of a manifest's shard `entry`, checked to exist with the manifest's sha256, or
    with its size in bytes alone (`sha256=False`: nothing read); SchemaError naming the file
    otherwise."""
    path = Path(directory) / entry["name"]
    if not path.is_file():
        raise SchemaError(f"{path}: listed in the manifest but missing")
    if sha256 and sha256_file(path) != entry["sha256"]:
        raise SchemaError(f"{path}: sha256 differs from the manifest (corrupt or rewritten)")
    if not sha256 and path.stat().st_size != entry["bytes"]:
        raise SchemaError(f"{path}: {path.stat().st_size} bytes, the manifest says {entry['bytes']} "
                          "(corrupt or rewritten)")
    return path


def verify_shard_set(directory: str | Path, require_image: bool = True,
                     allow_incomplete: bool = False) -> dict[str, int]:
    """Read every shard back: hash, sample count and schema. Raises SchemaError naming the shard.
    A set whose writer has not finished (manifest `complete: false`) is refused unless
    `allow_incomplete` (then its complete shards are verified)."""
    manifest = read_manifest(directory)
    if not manifest.get("complete", True) and not allow_incomplete:
        raise SchemaError(f"{Path(directory) / MANIFEST}: shard set is unfinished (complete: false, "
                          f"{len(manifest['shards'])} shard(s) written); rerun the command that wrote it to finish it")
    totals = Counter()
    for entry in manifest["shards"]:
        path = listed_shard(directory, entry)
        count = 0
        for raw in iter_raw_samples(path):
            sample = ShardSample.from_wds(raw, require_image=require_image)
            count += 1
            totals["negatives"] += len(sample.negatives)
            totals["partners"] += sample.partner is not None
            totals["with_neighbours"] += bool(sample.neighbours)
        if count != entry["samples"]:
            raise SchemaError(f"{path}: {count} samples, manifest says {entry['samples']}")
        totals["samples"] += count
        totals["shards"] += 1
    return dict(totals)


class KeyIndex:
    """Random access to any member of any sample of a shard set, by key.

    `build(directory)` writes `keys.tsv` (key, member, shard, offset, size); lookups then read
    the bytes straight from the tar file with one seek, without decoding anything else.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        path = self.directory / KEY_INDEX
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no key index; build it with KeyIndex.build('{directory}')")
        self._where: dict[tuple[str, str], tuple[str, int, int]] = {}
        for line in path.read_text().splitlines():
            key, member, shard, offset, size = line.split("\t")
            self._where[(key, member)] = (shard, int(offset), int(size))

    @staticmethod
    def build(directory: str | Path) -> Path:
        directory = Path(directory)
        rows = []
        for url in shard_urls(directory):
            with tarfile.open(url, "r") as tar:
                for member in tar:
                    if member.isfile():
                        key, _, ext = member.name.partition(".")
                        rows.append(f"{key}\t{ext}\t{Path(url).name}\t{member.offset_data}\t{member.size}\n")
        return atomic_write(directory / KEY_INDEX, lambda f: f.writelines(rows), "w")

    def __contains__(self, key: str) -> bool:
        return (key, "txt") in self._where

    def read(self, key: str, member: str) -> bytes:
        try:
            shard, offset, size = self._where[(key, member)]
        except KeyError:
            raise KeyError(f"{self.directory}: no member '{member}' for key '{key}'") from None
        with open(self.directory / shard, "rb") as handle:
            handle.seek(offset)
            return handle.read(size)
