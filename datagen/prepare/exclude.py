"""Benchmark images out of training: which COCO ids data preparation leaves out, and the record.

    ex = benchmark_exclusion("data/benchmarks", karpathy="dataset_coco.json",
                             val2017="annotations/captions_val2017.json")
    items = (it for it in items if ex.keeps(it.meta.get("coco_id")))
    update_manifest(out, **ex.manifest_keys(input_ids))

The ids excluded, by name:
- `karpathy_val`, `karpathy_test`: images of Karpathy's val / test splits, read from a Karpathy
  `dataset_coco.json` (the input itself when it is one, or one given with `--karpathy-ref`);
- `coco_val2017`: COCO val2017 (SugarCrepe, SugarCrepe++, BiVLC and VISLA generic use it), from
  `captions_val2017.json` when one is given or lies next to the input captions file; without it
  the val2017 images the benchmark files name are still excluded under their benchmark's name;
- every benchmark of `compclip.shardset.benchmark_ids.COCO_BENCHMARKS` (visla, sugarcrepe, sugarcrepe_pp, bivlc,
  aro, retrieval; their sub-views visla_lexical and left_right read the same files) found under
  the benchmarks root, by the ids `compclip.shardset.benchmark_ids` reads from its files.
A source whose files are absent is listed as unchecked with the reason. The kept items are what
the seeded order permutes, so a resume must see the same exclusion: `pin_exclusion` writes its
fingerprint to `exclusion.json` in the output set when the set starts and refuses (one line) a
resume whose benchmark files give other ids. The manifest gets
`excluded` ({name: input images left out because of it}; an image named by two sources counts
under both) and `exclusion` (root, unchecked sources, total images and input items dropped, the
size of each id list), or `exclusion: {"disabled": true}` with `--keep-benchmark-images`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from compclip.shardset.benchmark_ids import benchmark_ids

DEFAULT_BENCHMARKS_ROOT = "data/benchmarks"
# The benchmarks whose files name COCO images; visla_lexical / left_right read visla's / aro's.
SCORED = ("visla", "sugarcrepe", "sugarcrepe_pp", "bivlc", "aro", "retrieval")
VAL2017_CAPTIONS = "captions_val2017.json"
PIN_FILE = "exclusion.json"


@dataclass
class Exclusion:
    """COCO ids to leave out, by the source that names them."""
    root: Optional[str] = None
    ids: dict[str, set[int]] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)
    disabled: bool = False
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._all: set[int] = set().union(*self.ids.values()) if self.ids else set()

    def keeps(self, coco_id: Optional[int]) -> bool:
        """True unless `coco_id` is a benchmark image (items without a COCO id are kept)."""
        return self.disabled or coco_id is None or int(coco_id) not in self._all

    def fingerprint(self) -> str:
        """A hash of what is excluded (the ids by source, or disabled)."""
        text = json.dumps({"disabled": self.disabled,
                           "ids": {n: sorted(i) for n, i in sorted(self.ids.items())}})
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def manifest_keys(self, input_ids: Iterable[int], items_dropped: int = 0) -> dict[str, Any]:
        """`excluded` and `exclusion` for the manifest of a set read from images `input_ids`."""
        if self.disabled:
            return {"excluded": {}, "exclusion": {"disabled": True}}
        input_ids = set(input_ids)
        excluded = {name: len(ids & input_ids) for name, ids in sorted(self.ids.items())}
        return {"excluded": excluded,
                "exclusion": {"benchmarks_root": self.root, "unchecked": dict(sorted(self.unchecked.items())),
                              "images": len(self._all & input_ids), "items": items_dropped,
                              "benchmark_images": {n: len(i) for n, i in sorted(self.ids.items())},
                              "notes": self.notes}}

    def summary(self, keys: dict[str, Any]) -> str:
        """One line for stderr: what was excluded and what could not be checked."""
        if self.disabled:
            return "benchmark images kept (--keep-benchmark-images)"
        parts = [f"{n} {c}" for n, c in keys["excluded"].items()]
        text = f"excluded {keys['exclusion']['images']} benchmark images ({', '.join(parts) or 'none'})"
        if self.unchecked:
            text += f"; unchecked: {', '.join(sorted(self.unchecked))}"
        return text


def karpathy_split_ids(path: str | Path, splits: Iterable[str] = ("val", "test")) -> dict[str, set[int]]:
    """{`karpathy_<split>`: COCO ids} of a Karpathy `dataset_coco.json`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        images = data["images"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a readable Karpathy dataset JSON ({err})") from None
    out: dict[str, set[int]] = {f"karpathy_{s}": set() for s in splits}
    for i, img in enumerate(images):
        name = f"karpathy_{img.get('split')}"
        if name in out:
            if img.get("cocoid") is None:
                raise ValueError(f"{path}: images[{i}] has no 'cocoid' (a Karpathy COCO file is needed)")
            out[name].add(int(img["cocoid"]))
    return out


def coco_caption_image_ids(path: str | Path) -> set[int]:
    """The image ids of a COCO captions (or instances) JSON's `images` list."""
    path = Path(path)
    try:
        return {int(img["id"]) for img in json.loads(path.read_text(encoding="utf-8"))["images"]}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: not a readable COCO annotations JSON with 'images' ({err})") from None


def benchmark_exclusion(benchmarks_root: Optional[str | Path] = DEFAULT_BENCHMARKS_ROOT, *,
                        karpathy: Optional[str | Path] = None,
                        val2017: Optional[str | Path] = None,
                        benchmarks: Iterable[str] = SCORED, keep: bool = False) -> Exclusion:
    """Collect the ids to exclude (see the module docstring); `keep=True` excludes nothing."""
    if keep:
        return Exclusion(disabled=True)
    ids: dict[str, set[int]] = {}
    unchecked: dict[str, str] = {}
    notes: list[str] = []
    if karpathy is not None:
        ids.update(karpathy_split_ids(karpathy))
    else:
        for split in ("val", "test"):
            unchecked[f"karpathy_{split}"] = "no Karpathy dataset_coco.json given (--karpathy-ref)"
    if val2017 is not None and Path(val2017).is_file():
        ids["coco_val2017"] = coco_caption_image_ids(val2017)
    else:
        unchecked["coco_val2017"] = (f"{val2017}: absent" if val2017 else f"no {VAL2017_CAPTIONS} "
                                     "given (--val2017); the val2017 images the benchmarks name are excluded")
    root = Path(benchmarks_root) if benchmarks_root is not None else None
    for name in benchmarks:
        if root is None:
            unchecked[name] = "no benchmarks root"
            continue
        found = benchmark_ids(name, root)
        notes += found.notes
        if found.ids is None:
            unchecked[name] = f"absent: {', '.join(found.missing) or root}"
        else:
            ids[name] = found.ids
            if found.missing:
                unchecked[f"{name} (part)"] = f"absent: {', '.join(found.missing)}"
    if "karpathy_test" not in ids and "retrieval" in ids:
        unchecked.pop("karpathy_test", None)
    return Exclusion(str(root) if root is not None else None, ids, unchecked, notes=notes)


def sibling_val2017(input_path: str | Path) -> Optional[Path]:
    """`captions_val2017.json` next to the input file, or in an `annotations/` folder beside it."""
    input_path = Path(input_path)
    for candidate in (input_path.parent / VAL2017_CAPTIONS,
                      input_path.parent / "annotations" / VAL2017_CAPTIONS):
        if candidate.is_file() and candidate.resolve() != input_path.resolve():
            return candidate
    return None


def pin_exclusion(out_dir: str | Path, exclusion: Exclusion) -> None:
    """Record the exclusion of a new set; refuse to resume an unfinished set started with another."""
    out_dir = Path(out_dir)
    pin = out_dir / PIN_FILE
    wanted = {"fingerprint": exclusion.fingerprint(), "benchmarks_root": exclusion.root,
              "disabled": exclusion.disabled}
    manifest = json.loads((out_dir / "manifest.json").read_text()) \
        if (out_dir / "manifest.json").is_file() else {}
    started = bool(manifest.get("shards"))
    if manifest.get("complete"):  # a finished set is reused as it is; its manifest says what it left out
        return
    if started and pin.is_file():
        have = json.loads(pin.read_text())
        if have.get("fingerprint") != wanted["fingerprint"]:
            raise ValueError(f"{pin}: this set was started leaving out other benchmark images "
                             f"({have}) than now ({wanted}); resume with the same benchmark files "
                             "and options, or write to a new folder")
        return
    if not started:
        out_dir.mkdir(parents=True, exist_ok=True)
        pin.write_text(json.dumps(wanted))
