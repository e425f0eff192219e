"""The COCO image ids each benchmark scores, read from its files (layout: docs/benchmark_data.md).

    coco_ids_of("visla", "data/benchmarks")            # -> {318723, 460347, ...} or None
    benchmark_coco_ids(["visla", "aro"], "data/benchmarks")
    benchmark_ids("aro", "data/benchmarks")             # ids plus files read / missing, notes

Used by data preparation (to leave benchmark images out of training shard sets) and by the
trainer (to refuse training images that a recipe's evaluation scores). Only text files are
read (no image, no model), nothing is written, and results are not cached, so a changed file is
seen at once. A COCO id is the number in the image file name: `000000318723.jpg` (COCO 2017)
and `val2014/COCO_val2014_000000391895.jpg` (COCO 2014, Karpathy files) both give the id.

| benchmark | files under the data root | ids |
|---|---|---|
| visla, visla_lexical | `visla/Generic_VISLA.tsv`, `visla/Spatial_VISLA.tsv` (first column) | COCO 2017 file names; generic: val2017; spatial: train2017 and val2017 |
| sugarcrepe | `sugarcrepe/<subset>.json` (`filename`) | val2017 |
| sugarcrepe_pp | `sugarcrepe_pp/<subset>.json` (`filename`) | val2017 |
| bivlc | `bivlc/` (save_to_disk) | an id column (`coco_id`, `image_id`, `filename`, `file_name`, `image_path`) or the stored `image.path` file names when present; BiVLC as published has neither (its `image` column holds bytes), and is built from SugarCrepe's val2017 images, so its ids are SugarCrepe's (read from `sugarcrepe/`; a note says so) |
| aro | `aro/coco_karpathy_test.json` (`image`), and `aro/visual_genome_{relation,attribution}.json` (`image_path`, a VG id) mapped through VG's `aro/image_data.json` (`image_id` -> `coco_id`) | Karpathy test (val2014 images); the VG images that are COCO images |
| left_right | `aro/visual_genome_relation.json` through `aro/image_data.json` | as aro's VG part |
| retrieval | `retrieval/coco_karpathy_test.json`, else `aro/coco_karpathy_test.json` | Karpathy test |
| other benchmarks (zeroshot, ...) | - | no COCO images: None |

A benchmark whose files are all absent gives None from `coco_ids_of`; `benchmark_ids` also says
which files it read, which were absent and what could not be checked (e.g. VG images without
`image_data.json`), so callers can report a benchmark as unchecked rather than clean.
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from compclip.errors import CompclipError

VISLA_FILES = ("Generic_VISLA.tsv", "Spatial_VISLA.tsv")
SUGARCREPE_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel",
                      "swap_att", "swap_obj")
SUGARCREPE_PP_SUBSETS = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
VG_FILES = ("visual_genome_relation.json", "visual_genome_attribution.json")
VG_METADATA = "image_data.json"  # Visual Genome's image metadata: [{image_id, coco_id, ...}]
KARPATHY_TEST = "coco_karpathy_test.json"
BIVLC_ID_COLUMNS = ("coco_id", "image_id", "filename", "file_name", "image_path")
_ID_IN_NAME = re.compile(r"(\d+)\.(?:jpe?g|png|webp)$", re.IGNORECASE)


class ImageIdError(CompclipError, ValueError):
    """A benchmark file that cannot be read for image ids; the message names the file."""


@dataclass
class BenchmarkIds:
    """The COCO ids a benchmark scores and how they were found."""
    name: str
    ids: Optional[set[int]]  # None: no COCO images, or no file to read them from
    read: list[str] = field(default_factory=list)  # files the ids came from
    missing: list[str] = field(default_factory=list)  # files looked for and absent
    notes: list[str] = field(default_factory=list)  # what could not be checked, and why


def coco_id_from_name(name: str) -> Optional[int]:
    """The COCO id in an image file name or path, or None when it holds none."""
    match = _ID_IN_NAME.search(str(name).strip())
    return int(match.group(1)) if match else None


def coco_ids_of(benchmark: str, data_root: str | Path) -> Optional[set[int]]:
    """COCO ids scored by `benchmark` under `data_root`; None if it has none or its files are absent."""
    return benchmark_ids(benchmark, data_root).ids


def benchmark_coco_ids(benchmarks: Iterable[str], data_root: str | Path) -> dict[str, set[int]]:
    """{benchmark: COCO ids} for those of `benchmarks` whose ids could be read."""
    out = {}
    for name in benchmarks:
        ids = coco_ids_of(name, data_root)
        if ids is not None:
            out[name] = ids
    return out


def benchmark_ids(benchmark: str, data_root: str | Path) -> BenchmarkIds:
    """Like `coco_ids_of`, with the files read and missing and notes (see the module docstring)."""
    root = Path(data_root)
    reader = _READERS.get(benchmark)
    if reader is None:
        return BenchmarkIds(benchmark, None, notes=[f"{benchmark}: no COCO images"])
    result = BenchmarkIds(benchmark, set())
    reader(root, result)
    if not result.read:
        result.ids = None
    return result


def _files(result: BenchmarkIds, paths: Iterable[Path]) -> list[Path]:
    present = []
    for path in paths:
        if path.is_file():
            present.append(path)
        else:
            result.missing.append(str(path))
    return present


def _add_names(result: BenchmarkIds, path: Path, names: Iterable[str]) -> None:
    for i, name in enumerate(names):
        coco_id = coco_id_from_name(name)
        if coco_id is None:
            raise ImageIdError(f"{path}: item {i}: image '{name}' has no COCO id in its name")
        result.ids.add(coco_id)
    result.read.append(str(path))


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ImageIdError(f"{path}: not readable JSON ({err})") from None


def _visla(root: Path, result: BenchmarkIds) -> None:
    for path in _files(result, (root / "visla" / f for f in VISLA_FILES)):
        with open(path, newline="", encoding="utf-8") as handle:
            rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
            next(rows, None)  # header
            _add_names(result, path, (r[0] for r in rows if r and r[0].strip()))


def _sugarcrepe_like(folder: str, subsets: tuple[str, ...]):
    def read(root: Path, result: BenchmarkIds) -> None:
        for path in _files(result, (root / folder / f"{s}.json" for s in subsets)):
            data = _load_json(path)
            items = data.values() if isinstance(data, dict) else data
            try:
                _add_names(result, path, (it["filename"] for it in items))
            except (KeyError, TypeError):
                raise ImageIdError(f"{path}: items need a 'filename' field") from None
    return read


def _karpathy_test(result: BenchmarkIds, paths: list[Path]) -> None:
    present = [p for p in paths if p.is_file()]
    if not present:
        result.missing.append(str(paths[0]))
        return
    data = _load_json(present[0])
    try:
        _add_names(result, present[0], (it["image"] for it in data))
    except (KeyError, TypeError):
        raise ImageIdError(f"{present[0]}: items need an 'image' field") from None


def _vg(root: Path, result: BenchmarkIds, files: tuple[str, ...]) -> None:
    present = _files(result, (root / "aro" / f for f in files))
    if not present:
        return
    meta_path = root / "aro" / VG_METADATA
    if not meta_path.is_file():
        result.missing.append(str(meta_path))
        result.notes.append(f"{result.name}: VG images not checked against COCO: {meta_path} "
                            "(Visual Genome image_data.json, image_id -> coco_id) is absent")
        return
    coco_of = {}
    for i, row in enumerate(_load_json(meta_path)):
        try:
            if row.get("coco_id") is not None:
                coco_of[int(row["image_id"])] = int(row["coco_id"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ImageIdError(f"{meta_path}: item {i}: needs 'image_id' and 'coco_id'") from None
    for path in present:
        data = _load_json(path)
        try:
            vg_ids = {coco_id_from_name(it["image_path"]) for it in data}
        except (KeyError, TypeError):
            raise ImageIdError(f"{path}: items need an 'image_path' field") from None
        result.ids.update(coco_of[v] for v in vg_ids if v in coco_of)
        result.read.append(str(path))
    result.read.append(str(meta_path))


def _aro(root: Path, result: BenchmarkIds) -> None:
    _karpathy_test(result, [root / "aro" / KARPATHY_TEST])
    _vg(root, result, VG_FILES)


def _left_right(root: Path, result: BenchmarkIds) -> None:
    _vg(root, result, VG_FILES[:1])


def _retrieval(root: Path, result: BenchmarkIds) -> None:
    _karpathy_test(result, [root / "retrieval" / KARPATHY_TEST, root / "aro" / KARPATHY_TEST])


def _bivlc(root: Path, result: BenchmarkIds) -> None:
    folder = root / "bivlc"
    if not folder.is_dir():
        result.missing.append(str(folder))
        return
    names = _bivlc_names(folder)
    if names is not None:
        _add_names(result, folder, names)
        return
    sugarcrepe = BenchmarkIds("sugarcrepe", set())
    _sugarcrepe_like("sugarcrepe", SUGARCREPE_SUBSETS)(root, sugarcrepe)
    result.notes.append(f"bivlc: {folder} gives no image file names or COCO ids; BiVLC is built "
                        "from SugarCrepe's val2017 images, so SugarCrepe's ids stand for it")
    if sugarcrepe.read:
        result.ids |= sugarcrepe.ids
        result.read += sugarcrepe.read
    else:
        result.missing += sugarcrepe.missing
        result.notes.append("bivlc: not checked: the SugarCrepe files are absent too")


def _bivlc_names(folder: Path) -> Optional[list[str]]:
    """File names / ids from an id column or the image column's stored paths, else None."""
    import datasets
    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as err:  # datasets raises several types for a broken folder
        raise ImageIdError(f"{folder}: not a dataset saved with save_to_disk ({err})") from None
    if isinstance(ds, datasets.DatasetDict):
        ds = ds["test"] if "test" in ds else next(iter(ds.values()))
    for column in BIVLC_ID_COLUMNS:
        if column in ds.column_names:
            return [v if isinstance(v, str) else f"{int(v)}.jpg" for v in ds[column]]
    if isinstance(ds.features.get("image"), datasets.Image):
        paths = ds.cast_column("image", datasets.Image(decode=False))["image"]
        names = [(p or {}).get("path") or "" for p in paths]
        if names and all(coco_id_from_name(n) is not None for n in names):
            return names
    return None


_READERS = {
    "visla": _visla, "visla_lexical": _visla,
    "sugarcrepe": _sugarcrepe_like("sugarcrepe", SUGARCREPE_SUBSETS),
    "sugarcrepe_pp": _sugarcrepe_like("sugarcrepe_pp", SUGARCREPE_PP_SUBSETS),
    "bivlc": _bivlc, "aro": _aro, "left_right": _left_right, "retrieval": _retrieval,
}
COCO_BENCHMARKS = tuple(_READERS)  # the benchmarks that score COCO images
