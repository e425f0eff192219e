"""`python -m eval download`: fetch each benchmark from its official source into a data root.

`SOURCES` is the whole table: GitHub files pinned to a full 40-character commit
(raw.githubusercontent.com), with the sha256 of the files that are fixed
(`eval.checksums.PINNED`, those of `../shared/benchmarks/SHA256SUMS`; every use checks them
too); the ARO annotation files and image zip from the Google Drive ids its reference loaders
use; the Karpathy test splits from the BLIP bucket ARO reads; COCO image zips; CIFAR tarballs
(md5 as torchvision checks); the Hugging Face dataset `imirandam/BiVLC` at a pinned revision,
saved with `save_to_disk`. Large image archives are fetched only with `--images`. Files are
written to a temporary name, checked, then renamed; a present file with a wrong checksum is
fetched again. Google Drive and BLIP-bucket files have no published checksum: the sha256 and
size of every file and archive fetched are recorded in the data root (`eval.checksums`) and
checked on every later use and every later download, so a truncated file or an upstream change
is caught. Flickr30k and ImageNet images need a licence sign-up: the command prints where to put
them. Each fetch shows a bar on stderr naming the file, with its size as the total when the
server sends one. A file that cannot be fetched is logged in one line as it fails and the others
are fetched; at the end `DownloadFailed` (a fault: exit 3) names every failed file in one line;
files already fetched are kept.

Pins: SugarCrepe `0047054b243992f0fad63d6f64f7544862daf846` and SugarCrepe++
`c083bbf039a5ca215acaf25e7ee736d2ea6f3864` (full hashes found in the stored repositories).
VISLA stays at the short `adedd6974a34`: its full hash could not be established from here (the
stored copy of Sri-Harsha/visla_benchmark has only older commits), and GitHub resolves the
short form; the sha256 pins of both files fix their content whatever the commit string.
BiVLC: revision `0c504074819f3fa83d5d3f37018f8b43c05bda82` (17 June 2024), the last commit
before the dataset was re-uploaded (`618ad54`, "Upload dataset"): it serves the parquet files
uploaded with the paper (`test-0000{0,1}-of-00002-<hash>.parquet`) and the finished dataset
card; the re-upload's full hash is not known here and its content is unverified against the
paper's numbers.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from compclip.cli import RunFault, one_line, progress
from compclip.eval import checksums
from compclip.eval.checksums import digest
from compclip.fileio import default_mode

log = logging.getLogger(__name__)

GITHUB = {  # repository @ commit (../shared/benchmarks/README.md names their 12-character prefixes)
    "visla": ("Sri-Harsha/visla_benchmark", "adedd6974a34"),  # full hash not established here
    "sugarcrepe": ("RAIVNLab/sugar-crepe", "0047054b243992f0fad63d6f64f7544862daf846"),
    "sugarcrepe_pp": ("Sri-Harsha/scpp", "c083bbf039a5ca215acaf25e7ee736d2ea6f3864"),
}
SHA256 = checksums.PINNED  # the published files' sha256, checked at download and at every use
BIVLC_REPO, BIVLC_REVISION = "imirandam/BiVLC", "0c504074819f3fa83d5d3f37018f8b43c05bda82"
DRIVE = "https://drive.usercontent.google.com/download?id={}&export=download&confirm=t"
BLIP = "https://storage.googleapis.com/sfr-vision-language-research/datasets/{}"
COCO = "http://images.cocodataset.org/zips/{}.zip"


@dataclass(frozen=True)
class Source:
    benchmark: str
    dest: str  # relative to the data root: the file, or the folder an archive unpacks into
    url: str
    kind: str = "file"  # file | zip | tar | hf
    sha256: Optional[str] = None
    md5: Optional[str] = None
    images: bool = False  # large image archive: only with --images


def github(bench: str, path: str, dest: str) -> Source:
    repo, commit = GITHUB[bench]
    return Source(bench, dest, f"https://raw.githubusercontent.com/{repo}/{commit}/{path}", sha256=SHA256[dest])


def _sources() -> list[Source]:
    from compclip.eval.benchmarks.sugarcrepe import SUBSETS as SC
    from compclip.eval.benchmarks.sugarcrepe_pp import SUBSETS as SCPP
    out = [github("visla", f"data/{f}", f"visla/{f}") for f in ("Generic_VISLA.tsv", "Spatial_VISLA.tsv")]
    out += [github("sugarcrepe", f"data/{s}.json", f"sugarcrepe/{s}.json") for s in SC]
    out += [github("sugarcrepe_pp", f"data/{s}.json", f"sugarcrepe_pp/{s}.json") for s in SCPP]
    for bench in ("visla", "sugarcrepe", "sugarcrepe_pp"):
        out.append(Source(bench, "coco", COCO.format("val2017"), "zip", images=True))  # -> coco/val2017/
    out.append(Source("visla", "coco", COCO.format("train2017"), "zip", images=True))  # spatial uses train too
    out.append(Source("bivlc", "bivlc", f"hf://datasets/{BIVLC_REPO}@{BIVLC_REVISION}", "hf"))
    out += [Source("aro", "aro/visual_genome_relation.json", DRIVE.format("1kX2iCHEv0CADL8dSO1nMdW-V0NqIAiP3")),
            Source("aro", "aro/visual_genome_attribution.json", DRIVE.format("13tWvOrNOLHxl3Rm9cR3geAdHx2qR3-Tw")),
            Source("aro", "aro", DRIVE.format("1qaPlrwhGNMrR3a11iopZUT_GPP_LrgP9"), "zip", images=True),  # -> aro/images/
            Source("aro", "aro/coco_images", COCO.format("val2014"), "zip", images=True)]  # -> aro/coco_images/val2014/
    for bench in ("aro", "retrieval"):
        out += [Source(bench, f"{bench}/{f}", BLIP.format(f)) for f in ("coco_karpathy_test.json", "flickr30k_test.json")]
    out.append(Source("retrieval", "aro/coco_images", COCO.format("val2014"), "zip", images=True))  # shared with ARO
    out += [Source("zeroshot", "zeroshot", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "tar",
                   md5="c58f30108f718f92721af3b95e74349a"),
            Source("zeroshot", "zeroshot", "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz", "tar",
                   md5="eb9058c3a382ffc7106e4002c42a8d85")]
    return out


SOURCES = _sources()
DIAGNOSTIC_DATA = {"visla_lexical": ["visla"], "left_right": ["aro"]}
MANUAL = {
    "aro": "Flickr30k images need a sign-up (https://forms.illinois.edu/sec/229675): put them under "
           "<root>/aro/flickr30k_images/flickr30k-images/",
    "retrieval": "COCO val2014 images are read from <root>/aro/coco_images (fetched with --images); Flickr30k "
                 "images need a sign-up (https://forms.illinois.edu/sec/229675): put them under "
                 "<root>/aro/flickr30k_images/flickr30k-images/",
    "zeroshot": "ImageNet needs a licence: put the validation set as <root>/zeroshot/imagenet/val/<wnid>/*.JPEG",
}


class DownloadFailed(RunFault, RuntimeError):
    """Some files could not be fetched (or failed their checksum); `failed` holds one line each."""

    def __init__(self, failed: list[str], names: list[str]):
        self.failed = failed
        super().__init__(f"{len(failed)} download(s) failed: {'; '.join(failed)}; files already fetched are kept: "
                         f"check the network (or the file's source) and run the same command again")
        self.names = names


QUIET = False  # `--quiet`: no download bars


def fetch(url: str, dest: Path, desc: Optional[str] = None) -> None:
    """Stream `url` (http(s) or file://) to `dest`, with a bar named `desc` (bytes, total when known)."""
    req = urllib.request.Request(url, headers={"User-Agent": "compclip-eval"})
    with urllib.request.urlopen(req, timeout=60) as r, open(dest, "wb") as f:
        size = r.headers.get("Content-Length") if hasattr(r, "headers") else None
        with progress(total=int(size) if size and size.isdigit() else None, desc=f"download {desc or url}",
                      unit="B", unit_scale=True, unit_divisor=1024, quiet=QUIET, leave=False) as bar:
            while chunk := r.read(1 << 20):
                f.write(chunk)
                bar.update(len(chunk))


def _check(src: Source, path: Path) -> Optional[str]:
    """None if the checksum matches (or none is pinned), else the problem."""
    for algo, want in (("sha256", src.sha256), ("md5", src.md5)):
        if want and (got := digest(path, algo)) != want:
            return f"{path}: {algo} {got} != expected {want} (from {src.url})"
    return None


def _check_recorded(recorded: Optional[dict], path: Path, what: str) -> Optional[str]:
    """None if `path` matches the checksum recorded at its first download (or none is)."""
    if recorded and (got := digest(path)) != recorded["sha256"]:
        return (f"{what}: sha256 {got} differs from {recorded['sha256']} recorded at its first download "
                f"(the file changed upstream; delete its entry in {checksums.RECORD} to accept it)")
    return None


def _get_file(src: Source, root: Path, force: bool) -> None:
    dest = root / src.dest
    recorded = checksums.read(root)["files"].get(src.dest)
    if dest.is_file() and not force:
        problem = _check(src, dest) or checksums.changed(root, src.dest)
        if problem is None:
            log.info("ok      %s", dest)
            return
        log.warning("corrupt %s; fetching again", problem)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    os.close(fd)
    try:
        log.info("fetch   %s -> %s", src.url, dest)
        fetch(src.url, Path(tmp), desc=src.dest)
        problem = _check(src, Path(tmp)) or _check_recorded(recorded, Path(tmp), f"{dest} <- {src.url}")
        if problem:
            raise ValueError(f"download check failed: {problem}")
        os.chmod(tmp, default_mode())  # mkstemp made it 0600: give it the mode open() would
        os.replace(tmp, dest)
        if not recorded:
            checksums.record(root, "files", src.dest, {"sha256": digest(dest), "size": dest.stat().st_size,
                                                        "url": src.url})
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _get_archive(src: Source, root: Path, force: bool) -> None:
    target = root / src.dest
    stamp = target / f".done-{hashlib.sha1(src.url.encode()).hexdigest()[:12]}"  # one marker per archive
    if stamp.exists() and not force:
        log.info("ok      %s (unpacked)", target)
        return
    target.mkdir(parents=True, exist_ok=True)
    recorded = checksums.read(root)["archives"].get(src.url)
    fd, tmp = tempfile.mkstemp(dir=target, prefix=".archive.")
    os.close(fd)
    try:
        log.info("fetch   %s -> %s", src.url, target)
        fetch(src.url, Path(tmp), desc=f"{src.dest} ({Path(src.url).name})")
        problem = _check(src, Path(tmp)) or _check_recorded(recorded, Path(tmp), src.url)
        if problem:
            raise ValueError(f"download check failed: {problem}")
        if src.kind == "zip":
            with zipfile.ZipFile(tmp) as z:
                z.extractall(target)
        else:
            with tarfile.open(tmp) as t:
                t.extractall(target, filter="data")
        if not recorded:
            checksums.record(root, "archives", src.url, {"sha256": digest(Path(tmp)), "size": os.path.getsize(tmp),
                                                          "dest": src.dest})
        stamp.touch()
    finally:
        os.remove(tmp)


def _get_hf(src: Source, root: Path, force: bool) -> None:
    target = root / src.dest
    if (target / "dataset_info.json").exists() and not force:
        log.info("ok      %s", target)
        return
    import datasets
    log.info("fetch   %s@%s (test split) -> %s", BIVLC_REPO, BIVLC_REVISION, target)
    ds = datasets.load_dataset(BIVLC_REPO, split="test", revision=BIVLC_REVISION)
    ds.save_to_disk(str(target))


def sources_for(benchmarks: Iterable[str], images: bool) -> list[Source]:
    from compclip.eval.registry import get_benchmark
    names = []
    for b in benchmarks:
        get_benchmark(b)  # unknown names fail here, with the list of known ones
        names += DIAGNOSTIC_DATA.get(b, [b])
    seen, out = set(), []
    for s in SOURCES:
        if s.benchmark in names and (images or not s.images) and (s.dest, s.url) not in seen:
            seen.add((s.dest, s.url))
            out.append(s)
    return out


def download(benchmarks: Iterable[str], data_root: str | Path, images: bool = False, force: bool = False,
             sources: Optional[list[Source]] = None) -> list[Source]:
    """Fetch what the benchmarks need (their image archives too with `images`)."""
    root = Path(data_root)
    benchmarks = list(benchmarks)
    todo = sources if sources is not None else sources_for(benchmarks, images)
    failed, names = [], []
    for src in todo:
        try:
            {"file": _get_file, "zip": _get_archive, "tar": _get_archive, "hf": _get_hf}[src.kind](src, root, force)
        except Exception as e:  # noqa: BLE001 -- keep going; every failure is named at the end
            failed.append(f"{src.dest} ({one_line(e)})")
            names.append(src.dest)
            log.warning("failed  %s <- %s: %s", root / src.dest, src.url, one_line(e))
    for b in benchmarks:
        if b in MANUAL:
            log.info("note    %s", MANUAL[b])
    if not images and any(s.images for s in SOURCES if s.benchmark in benchmarks):
        log.info("note    image archives were not fetched; add --images to fetch them")
    if failed:
        raise DownloadFailed(failed, names)
    return todo
