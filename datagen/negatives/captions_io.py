"""Caption inputs for negative generation: one `CaptionItem` per caption, in a stable order.

`read_items(path)` picks the reader from the path:

| input                                   | key                 | meta                           |
|-----------------------------------------|---------------------|--------------------------------|
| COCO 2017 `captions_*.json` (`annotations`, `images`) | `coco<annotation id>` | `source`, `image_id`, `coco_id`, `image_path` |
| Karpathy `dataset_coco.json` (`images[].sentences`)   | `coco<sentid>`        | `source`, `image_id`, `coco_id`, `image_path`, `split` |
| `.csv` / `.tsv` with a header (image column: `filepath`, `image`, `image_path`, `filename`, `file_name`, `path`; caption column: `caption`, `title`, `text`, `sentence`) | `<file stem>_<row>` | `source`, `image_id` (= `image_path`), `image_path`, `coco_id` when the file name is COCO's |
| a shard set folder (`manifest.json`) or a `.tar` shard | the sample's key | the raw sample, undecoded (`raw`) |

`image_id` identifies the image within `source` (all captions of one image share it); `coco_id`
(int) is set whenever the image is a COCO image: the id of a COCO 2017 file, Karpathy's
`cocoid` (Karpathy's Flickr files have none), or a table row whose file name is COCO's
(`000000391895.jpg`, `COCO_val2014_000000391895.jpg`).
Bad input raises `InputError` naming the file and the line, row or key; a byte that is not
UTF-8 is reported at its line in the file (`bad_utf8_line`), not at the line the reader had
reached when the decoder met it (text files are decoded in blocks).
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from compclip.shardset.shards import iter_raw_samples, shard_urls
from compclip.errors import InputError

IMAGE_COLUMNS = ("filepath", "image", "image_path", "filename", "file_name", "path")
CAPTION_COLUMNS = ("caption", "title", "text", "sentence")
_KEY_SAFE = re.compile(r"[^A-Za-z0-9_-]")
_COCO_FILE = re.compile(r"(?:^|/)(?:COCO_(?:train|val|test)2014_)?(\d{12})\.jpg$")


def coco_id_of_file(name: str) -> Optional[int]:
    """The COCO id of a COCO image file name (2014 or 2017 style), else None."""
    match = _COCO_FILE.search(name.strip())
    return int(match.group(1)) if match else None


# unreadable caption input raises `InputError`; the message names the file and where in it


@dataclass
class CaptionItem:
    key: str
    caption: str
    meta: dict[str, Any] = field(default_factory=dict)
    raw: Optional[dict[str, Any]] = None  # the undecoded shard sample, for shard inputs


def read_items(path: str | Path, image_col: Optional[str] = None,
               caption_col: Optional[str] = None) -> Iterator[CaptionItem]:
    path = Path(path)
    if path.is_dir():
        if not (path / "manifest.json").is_file():
            raise InputError(f"{path}: a folder input must be a shard set with manifest.json")
        return _read_shards(shard_urls(path))
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".tar":
        return _read_shards([str(path)])
    if suffix == ".json":
        return _read_coco_json(path)
    if suffix in (".csv", ".tsv"):
        return _read_table(path, "\t" if suffix == ".tsv" else ",", image_col, caption_col)
    raise InputError(f"{path}: unknown input type '{suffix}' (expected .json, .csv, .tsv, .tar "
                     "or a shard set folder)")


def _read_shards(urls: list[str]) -> Iterator[CaptionItem]:
    for url in urls:
        for raw in iter_raw_samples(url):
            if "txt" not in raw:
                raise InputError(f"{url}: sample '{raw['__key__']}' has no 'txt' member")
            try:
                caption = raw["txt"].decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(f"{url}: sample '{raw['__key__']}' txt is not UTF-8 ({err})") from None
            yield CaptionItem(raw["__key__"], caption, raw=raw)


def bad_utf8_line(path: Path) -> tuple[int, str]:
    """(1-based line number, reason) of the first line of `path` that is not UTF-8, read line
    by line in binary; (0, "") if every line decodes."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return number, f"byte 0x{raw[err.start]:02x} at column {err.start + 1} is not UTF-8"
    return 0, ""


def _utf8_error(path: Path, err: UnicodeDecodeError) -> InputError:
    line, reason = bad_utf8_line(path)
    return InputError(f"{path}: line {line}: {reason}" if line else f"{path}: not UTF-8 ({err})")


def _read_coco_json(path: Path) -> Iterator[CaptionItem]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise _utf8_error(path, err) from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None
    if isinstance(data, dict) and "annotations" in data:
        return _coco2017(path, data)
    if isinstance(data, dict) and isinstance(data.get("images"), list) and (
            not data["images"] or "sentences" in data["images"][0]):
        return _karpathy(path, data)
    raise InputError(f"{path}: neither COCO captions JSON (key 'annotations') nor Karpathy "
                     "dataset JSON (key 'images' with 'sentences')")


def _coco2017(path: Path, data: dict) -> Iterator[CaptionItem]:
    files = {}
    for i, img in enumerate(data.get("images", [])):
        try:
            files[img["id"]] = img["file_name"]
        except (KeyError, TypeError):
            raise InputError(f"{path}: images[{i}] lacks 'id' or 'file_name'") from None
    for i, ann in enumerate(data["annotations"]):
        try:
            ann_id, image_id, caption = ann["id"], ann["image_id"], ann["caption"]
        except (KeyError, TypeError):
            raise InputError(f"{path}: annotations[{i}] lacks 'id', 'image_id' or 'caption'") from None
        meta = {"source": path.name, "image_id": image_id, "coco_id": int(image_id)}
        if image_id in files:
            meta["image_path"] = files[image_id]
        yield CaptionItem(f"coco{ann_id}", str(caption), meta)


def _karpathy(path: Path, data: dict) -> Iterator[CaptionItem]:
    for i, img in enumerate(data["images"]):
        try:
            image_path = "/".join(p for p in (img.get("filepath", ""), img["filename"]) if p)
            sentences = img["sentences"]
        except (KeyError, TypeError):
            raise InputError(f"{path}: images[{i}] lacks 'filename' or 'sentences'") from None
        for j, sent in enumerate(sentences):
            try:
                caption, sent_id = sent["raw"], sent["sentid"]
            except (KeyError, TypeError):
                raise InputError(f"{path}: images[{i}].sentences[{j}] lacks 'raw' or 'sentid'") from None
            meta = {"source": path.name, "image_id": img.get("cocoid", img.get("imgid")),
                    "image_path": image_path, "split": img.get("split")}
            if img.get("cocoid") is not None:
                meta["coco_id"] = int(img["cocoid"])
            yield CaptionItem(f"coco{sent_id}", str(caption), meta)


def _pick_column(path: Path, header: list[str], wanted: Optional[str], options: tuple[str, ...],
                 what: str) -> int:
    lowered = [h.strip().lower() for h in header]
    names = [wanted.lower()] if wanted else list(options)
    for name in names:
        if name in lowered:
            return lowered.index(name)
    raise InputError(f"{path}: line 1: no {what} column (looked for {', '.join(names)}; "
                     f"header is {header})")


def _read_table(path: Path, delimiter: str, image_col: Optional[str],
                caption_col: Optional[str]) -> Iterator[CaptionItem]:
    stem = _KEY_SAFE.sub("_", path.stem)
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            return
        except UnicodeDecodeError as err:
            raise _utf8_error(path, err) from None
        except csv.Error as err:
            raise InputError(f"{path}: line 1: {err}") from None
        ci = _pick_column(path, header, caption_col, CAPTION_COLUMNS, "caption")
        ii = _pick_column(path, header, image_col, IMAGE_COLUMNS, "image path")
        row = 0
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except UnicodeDecodeError as err:
                raise _utf8_error(path, err) from None
            except csv.Error as err:
                raise InputError(f"{path}: line {reader.line_num}: {err}") from None
            if not fields:
                continue
            if len(fields) <= max(ci, ii):
                raise InputError(f"{path}: line {reader.line_num}: {len(fields)} fields, "
                                 f"expected {len(header)}")
            meta = {"source": path.name, "image_id": fields[ii], "image_path": fields[ii]}
            coco_id = coco_id_of_file(fields[ii])
            if coco_id is not None:
                meta["coco_id"] = coco_id
            yield CaptionItem(f"{stem}_{row:09d}", fields[ci], meta)
            row += 1
