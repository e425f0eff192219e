"""Benchmark scores kept on disk, keyed by what the model is and what the benchmark files hold.

    cache = ScoreCache("~/.cache/compclip/scores")
    scorer.cache_identity = model_identity("ViT-B-32", "runs/x/checkpoints/best.pt", "auto", "fp32", "cpu")
    run(scorer, ["visla", "sugarcrepe"], "data/", score_cache=cache)   # eval.api

One JSON file per (model, benchmark) holds that benchmark's `BenchmarkResult` (headline,
categories, counts, notes and the per-item records). Its name is the sha256 of its key, and the
file holds the key itself, which is compared whole on every read:

- the model identity (`model_identity`): a checkpoint file's sha256 with the architecture and
  lineage, or an open_clip architecture + pretrained tag; and the precision and device type it
  is scored in. Random weights, hub-hosted (`hf-hub:`) weights, weight folders and models without
  an identity (the model being trained, scored by the trainer's per-epoch eval) are not cached;
- the benchmark name, its options, whether images are scored;
- the sha256 of every file in the benchmark's data folders (`Benchmark.data_folders`) other than
  images and archives, hashed once per (size, mtime_ns) by `eval.checksums.file_sha256`;
- `FORMAT` and the compclip version.

The batch size is not in the key. Entries are written atomically (`compclip.fileio`); an entry
that cannot be read, is not an entry, or holds another key is not trusted: a warning names it,
the benchmark is scored again and the entry rewritten. A cache folder that cannot be written is
skipped with a warning.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Optional

from compclip.fileio import atomic_write

log = logging.getLogger(__name__)

FORMAT = 3  # 2: per-item records name their image (eval.stats clusters); 3: left_right keeps per-item records
NOT_HASHED = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff",  # images
              ".zip", ".tar", ".gz", ".tgz", ".part")  # archives (what they hold is hashed when extracted)
_FILE_SHA: dict[tuple[str, int, int], str] = {}


def default_dir() -> Optional[Path]:
    """`$COMPCLIP_SCORE_CACHE` (`off`: None, no cache), else `$XDG_CACHE_HOME/compclip/scores`, else
    `~/.cache/compclip/scores`."""
    env = os.environ.get("COMPCLIP_SCORE_CACHE")
    if env:
        return None if env.lower() == "off" else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "compclip" / "scores"


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("compclip")
    except Exception:  # noqa: BLE001 -- not installed: a checkout
        return "checkout"


def checkpoint_sha256(path: str | Path) -> str:
    """sha256 of a weights file, hashed once per (path, size, mtime_ns) in this process."""
    from compclip.eval.checksums import digest
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _FILE_SHA:
        _FILE_SHA[key] = digest(Path(path))
    return _FILE_SHA[key]


def device_type(device: str) -> str:
    """`torch.device(device).type`; torch is not imported for `cpu`."""
    if device == "cpu":
        return "cpu"
    import torch
    return torch.device(device).type


def model_identity(arch: Optional[str], weights: Optional[str], lineage: str, precision: str,
                   device: str) -> Optional[dict]:
    """The key part naming a model, or None for a model that is not cached (random weights, a
    weights folder, hub-hosted weights)."""
    common = {"arch": arch, "lineage": lineage, "precision": precision, "device": device_type(device)}
    if not weights:
        return None
    if os.path.isfile(weights):
        return {"checkpoint_sha256": checkpoint_sha256(weights), **common}
    if os.path.exists(weights) or weights.startswith("hf-hub:") or (arch or "").startswith("hf-hub:"):
        return None
    return {"pretrained": weights, **common}


def data_hashes(bench_cls, data_root: str | Path) -> dict[str, str]:
    """{relative path: sha256} of every file (not images or archives) in the benchmark's folders."""
    from compclip.eval.checksums import file_sha256
    root = Path(data_root)
    out = {}
    for folder in bench_cls.folders():
        for dirpath, dirnames, filenames in os.walk(root / folder):
            dirnames.sort()
            for name in sorted(filenames):
                if name.lower().endswith(NOT_HASHED):
                    continue
                rel = (Path(dirpath) / name).relative_to(root).as_posix()
                out[rel] = file_sha256(root, rel)
    return out


class ScoreCache:
    """Per-benchmark results on disk under `folder` (see the module docstring)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser()

    def key(self, identity: dict, bench_cls, data_root, options: dict, images: bool) -> dict:
        return {"format": FORMAT, "compclip": _version(), "model": identity, "benchmark": bench_cls.name,
                "options": json.loads(json.dumps(options, sort_keys=True, default=str)), "images": images,
                "files": data_hashes(bench_cls, data_root)}

    def path(self, key: dict) -> Path:
        name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        return self.folder / f"{key['benchmark']}-{name}.json"

    def get(self, key: dict):
        """The stored `BenchmarkResult` for `key`, or None (absent, or not trusted: warned)."""
        from compclip.eval.benchmarks.base import BenchmarkResult
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("key") != key:
                raise ValueError("it holds another key")
            r = data["result"]
            result = BenchmarkResult(r["name"], dict(r["headline"]), dict(r["categories"]), r["instances"],
                                     list(r["notes"]), dict(r["counts"]))
            if result.name != key["benchmark"] or not all(isinstance(v, (int, float))
                                                          for v in result.headline.values()):
                raise ValueError("its result is not this benchmark's")
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("score cache entry %s not used (%s: %s); scoring %s again", path, type(err).__name__, err,
                        key["benchmark"])
            return None
        return result

    def put(self, key: dict, result) -> None:
        data = {"key": key, "result": {"name": result.name, "headline": result.headline,
                                       "categories": result.categories, "instances": result.instances,
                                       "notes": result.notes, "counts": result.counts}}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path(key), lambda f: json.dump(data, f), "w")
        except (OSError, TypeError, ValueError) as err:
            log.warning("score cache entry for %s not written in %s (%s: %s)", result.name, self.folder,
                        type(err).__name__, err)
