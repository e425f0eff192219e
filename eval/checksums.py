"""Benchmark files checked against checksums: pinned ones for the published files, recorded ones
for downloads no checksum is published for.

`PINNED` holds the sha256 of every published benchmark file whose content is fixed (the GitHub
files of VISLA, SugarCrepe and SugarCrepe++, as `../shared/benchmarks/SHA256SUMS` lists them).
`python -m eval download` checks each fetched file against it, and every use checks the file at
that path in the data root against it too (`changed`), so a file edited by hand or replaced is a
one-line problem naming it. A data root holding one of `LOCAL_MARKERS` is data made locally in
these formats (`world_benchmarks.json`: the synthetic world writes it; `local_benchmarks.json`:
`tests.fixtures.eval_data` writes it through `mark_local`, and a user may write one for their own data):
its files are not the published ones and are not compared with the pins.

Google Drive files (ARO's annotations and image zip) and the BLIP bucket's Karpathy files have
no published checksum, so `python -m eval download` records the sha256 and size of every file and
archive it fetches in `<data_root>/recorded_checksums.json` at first download:

    {"files": {"aro/visual_genome_relation.json": {"sha256": "...", "size": 123, "url": "..."}},
     "archives": {"<url>": {"sha256": "...", "size": 456, "dest": "aro"}}}

Every later use verifies a recorded file (`changed`), so a file that was truncated, edited or
replaced upstream is caught with a one-line message naming it; a later download of an archive
is compared with its record. Files a user put in place by hand have no record; they are checked
only against a pin.

A file is hashed at most once per (size, mtime_ns): the sha256 is remembered in this process and
in `<data_root>/checksum_cache.json` (`{"files": {rel: {"size", "mtime_ns", "sha256"}}}`), so the
trainer's epochs and later commands do not hash it again until it changes. The cache is only a
cache: a damaged one is ignored and rewritten, one that cannot be written (a read-only data root)
is skipped.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Optional

from compclip.fileio import atomic_write

log = logging.getLogger(__name__)

RECORD = "recorded_checksums.json"
CACHE = "checksum_cache.json"
LOCAL_MARKERS = ("world_benchmarks.json", "local_benchmarks.json")
PINNED = {  # data-root path -> sha256 of the published file (../shared/benchmarks/SHA256SUMS)
    "sugarcrepe/add_att.json": "012d88d729693d193760e6f3393b06a1cf874380a9db0062e937201199fe044d",
    "sugarcrepe/add_obj.json": "1b9d76b93139a937b8dc1ada92a4f05ecc821bb3c291d752428bafadd4bb0682",
    "sugarcrepe/replace_att.json": "9fe55fd4c0a9ad1f85d486d9f6d0215b41f867eb025026e7f7b5ce44352545ee",
    "sugarcrepe/replace_obj.json": "9d299600639947e9d15281a9ded1382b376cf4ea088a8d08a1314bfe76e81898",
    "sugarcrepe/replace_rel.json": "356bcc2fc4c6aed3f4d9fd50acc58489bb1fe70c28791f9368d4cbf9ea39cdc9",
    "sugarcrepe/swap_att.json": "7a7ce04e5c4c80412b48c6f0c1347fb1a2f5d54c0be6aa429b64d390e442f8d0",
    "sugarcrepe/swap_obj.json": "073cdb8e253d053614e80710834d9773b09dbc1dd0a412f6f9492262caa1dcad",
    "sugarcrepe_pp/replace_att.json": "6826413592894754eeca02aeebbcbbc8b95a7456998abcc714e71c033ce6fe87",
    "sugarcrepe_pp/replace_obj.json": "5c6dc499ec8f511a8aa4ec1b7b5eb0eca90317488abe36ec39573355e2d361ab",
    "sugarcrepe_pp/replace_rel.json": "040fb95d3f0619bf515db60879e99709a87a5e9b4f524ec3403b127243480fd4",
    "sugarcrepe_pp/swap_att.json": "450d0fd9fcad3e6f44950dc634e7f901ab1c6d9c60a569ade5ae8ffb3d203ad8",
    "sugarcrepe_pp/swap_obj.json": "5f33cae824de431a7ecd3c5de6301f689815f9497aa36d96b154bbaf117b201b",
    "visla/Generic_VISLA.tsv": "99cad867a688d70af10e08ed2548720c95f88d774fb3e5e41bf6fddcab3fc6a6",
    "visla/Spatial_VISLA.tsv": "f1ec14db70183bf6748cf71324e98062f9f7c395d8202f60dbfabb7a6f1ab891",
}
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


def _write_json(data_root: Path, name: str, data: dict) -> None:
    """`<data_root>/<name>` replaced atomically (a temporary file renamed over it), with the mode a
    plain `open()` gives (`compclip.fileio.atomic_write`)."""
    atomic_write(data_root / name, lambda f: json.dump(data, f, indent=1, sort_keys=True), "w")


def record(data_root: str | Path, kind: str, key: str, entry: dict) -> None:
    """Add or replace one record (`kind` is "files" or "archives")."""
    root = Path(data_root)
    data = read(root)
    data[kind][key] = entry
    _write_json(root, RECORD, data)


def local_data(data_root: str | Path) -> Optional[str]:
    """The marker (one of `LOCAL_MARKERS`) that declares the data root locally made data, or None."""
    return next((m for m in LOCAL_MARKERS if (Path(data_root) / m).is_file()), None)


def mark_local(data_root: str | Path, made_by: str) -> Path:
    """Declare `data_root` locally made data (`local_benchmarks.json`): its files are not compared
    with the pins of the published files."""
    path = Path(data_root) / "local_benchmarks.json"
    path.write_text(json.dumps({"made_by": made_by, "note": "locally made benchmark data: eval does not compare "
                                "these files with the published files' pinned sha256"}, indent=1) + "\n")
    return path


def _read_cache(root: Path) -> dict:
    try:
        files = json.loads((root / CACHE).read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError):  # absent or damaged: it is only a cache
        return {}
    return files if isinstance(files, dict) else {}


def _remember(root: Path, rel: str, entry: dict) -> None:
    files = _read_cache(root)
    files[rel] = entry
    try:
        _write_json(root, CACHE, {"files": files})
    except OSError as e:  # a read-only data root: hashed again by the next process
        log.debug("checksum cache not written in %s (%s)", root, e)


def file_sha256(data_root: str | Path, rel: str) -> str:
    """sha256 of `<data_root>/<rel>`, hashed at most once per (size, mtime_ns) of the file."""
    root = Path(data_root)
    path = root / rel
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        hit = _read_cache(root).get(rel)
        if isinstance(hit, dict) and (hit.get("size"), hit.get("mtime_ns")) == (st.st_size, st.st_mtime_ns) \
                and isinstance(hit.get("sha256"), str):
            _VERIFIED[key] = hit["sha256"]
        else:
            _VERIFIED[key] = digest(path)
            _remember(root, rel, {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _VERIFIED[key]})
    return _VERIFIED[key]


def _record_problem(root: Path, rel: str, path: Path) -> Optional[str]:
    """None if `rel` has no record or matches it."""
    want = read(root)["files"].get(rel)
    if not want:
        return None
    size = path.stat().st_size
    if size != want.get("size", size):
        return (f"{path} is {size} bytes but was {want['size']} bytes when downloaded "
                f"(truncated or changed; see {root / RECORD})")
    got = file_sha256(root, rel)
    if got != want["sha256"]:
        return (f"{path} changed since it was downloaded (sha256 {got[:16]}..., recorded "
                f"{want['sha256'][:16]}... in {root / RECORD})")
    return None


def _pin_problem(root: Path, rel: str, path: Path) -> Optional[str]:
    """None if `rel` has no pin, the data root is local data, or the file matches its pin."""
    want = PINNED.get(rel)
    if not want or local_data(root):
        return None
    got = file_sha256(root, rel)
    if got != want:
        return (f"{path} is not the published file (sha256 {got[:16]}..., pinned {want[:16]}...: edited or "
                f"replaced); fetch it again (for data of your own in this format, put local_benchmarks.json "
                f"in the data root)")
    return None


def changed(data_root: str | Path, rel: str) -> Optional[str]:
    """None if `rel` is absent or matches its record and its pin; else a one-line description naming
    the file."""
    root = Path(data_root)
    path = root / rel
    if not path.is_file():
        return None
    return _record_problem(root, rel, path) or _pin_problem(root, rel, path)
