"""Checksums recorded in the data root for downloads no pinned checksum exists for.

Google Drive files (ARO's annotations and image zip) and the BLIP bucket's Karpathy files have
no published checksum, so `python -m eval download` records the sha256 and size of every file and
archive it fetches in `<data_root>/recorded_checksums.json` at first download:

    {"files": {"aro/visual_genome_relation.json": {"sha256": "...", "size": 123, "url": "..."}},
     "archives": {"<url>": {"sha256": "...", "size": 456, "dest": "aro"}}}

Every later use verifies a recorded file (`changed`), so a file that was truncated, edited or
replaced upstream is caught with a one-line message naming it; a later download of an archive
is compared with its record. Files a user put in place by hand have no record and are not
checked. Hashing is cached per process by (path, size, mtime), so the trainer's epochs hash once.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Optional

RECORD = "recorded_checksums.json"
_VERIFIED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, hashed this process


def digest(path: Path, algo: str = "sha256") -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read(data_root: str | Path) -> dict:
    path = Path(data_root) / RECORD
    if not path.is_file():
        return {"files": {}, "archives": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); delete it to record checksums afresh") from e
    return {"files": dict(data.get("files", {})), "archives": dict(data.get("archives", {}))}


def _write(data_root: Path, data: dict) -> None:
    data_root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=data_root, prefix=f".{RECORD}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, data_root / RECORD)


def record(data_root: str | Path, kind: str, key: str, entry: dict) -> None:
    """Add or replace one record (`kind` is "files" or "archives")."""
    root = Path(data_root)
    data = read(root)
    data[kind][key] = entry
    _write(root, data)


def sha256_cached(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = digest(path)
    return _VERIFIED[key]


def changed(data_root: str | Path, rel: str) -> Optional[str]:
    """None if `rel` has no record or matches it; else a one-line description naming the file."""
    root = Path(data_root)
    want = read(root)["files"].get(rel)
    path = root / rel
    if not want or not path.is_file():
        return None
    size = path.stat().st_size
    if size != want.get("size", size):
        return (f"{path} is {size} bytes but was {want['size']} bytes when downloaded "
                f"(truncated or changed; see {root / RECORD})")
    got = sha256_cached(path)
    if got != want["sha256"]:
        return (f"{path} changed since it was downloaded (sha256 {got[:16]}..., recorded "
                f"{want['sha256'][:16]}... in {root / RECORD})")
    return None
