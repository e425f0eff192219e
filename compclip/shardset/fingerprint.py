"""Fingerprints of a writer's inputs, so a resume that reads other input than the start is refused.

    fp = fingerprint("captions_train2017.json")      # recorded when the output starts
    changed(fp, "captions_train2017.json")           # None, or what changed, in words

- a file: `{"size", "mtime_ns", "sha256"}`;
- a shard set folder (one with `manifest.json`): `{"shards", "samples", "sha256"}`, the hash of
  its shards' sha256 in order (read from the manifest; the shards are not read);
- any other folder (an object bank): `{"files", "bytes", "sha256"}` over its image files
  (`compclip.shardset.imageio.IMAGE_SUFFIXES`, sub-folders included, hidden files not), the hash of their
  relative names, sizes and mtime_ns.
A file whose size and mtime_ns equal a known fingerprint's is not hashed again (`fingerprint(path,
known)` returns `known`); one whose mtime alone changed is hashed and counts as unchanged when its
bytes are the same. `compclip.shardset.shards.pin_options` / `pin_inputs` record them in the manifest.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def fingerprint(path: str | Path, known: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The fingerprint of an input (see the module docstring); `{"missing": true}` if it is gone."""
    path = Path(path)
    if path.is_file():
        stat = path.stat()
        if known and known.get("size") == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
            return known
        return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}
    if (path / "manifest.json").is_file():
        shards = json.loads((path / "manifest.json").read_text())["shards"]
        return {"shards": len(shards), "samples": sum(s["samples"] for s in shards),
                "sha256": _digest([s["sha256"] for s in shards])}
    if path.is_dir():
        from compclip.shardset.imageio import IMAGE_SUFFIXES
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES
                       and p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
        stats = [(p.relative_to(path).as_posix(), p.stat()) for p in files]
        return {"files": len(stats), "bytes": sum(s.st_size for _, s in stats),
                "sha256": _digest([f"{n}\t{s.st_size}\t{s.st_mtime_ns}" for n, s in stats])}
    return {"missing": True}


def changed(known: dict[str, Any], path: str | Path) -> Optional[str]:
    """What differs between `known` and the input at `path` now, in words; None if nothing."""
    now = fingerprint(path, known)
    if now.get("sha256") == known.get("sha256") and now.get("missing") == known.get("missing"):
        return None
    if now.get("missing"):
        return "it no longer exists"
    for field, unit in (("size", " bytes"), ("shards", " shards"), ("samples", " samples"),
                        ("files", " image files"), ("bytes", " bytes")):
        if field in known and known.get(field) != now.get(field):
            return f"{field} {known[field]}{unit} then, {now.get(field)}{unit} now"
    what = "contents" if "size" in known else "shard hashes" if "shards" in known else "file names or times"
    return f"its {what} differ (sha256 {str(known.get('sha256'))[:12]} then, {str(now.get('sha256'))[:12]} now)"
