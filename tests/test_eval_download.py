"""Download table (pinned URLs, checksums) and the download path via file:// URLs."""
import hashlib
import re
from pathlib import Path

import pytest

from compclip.eval import download as dl


def test_fixed_files_are_pinned_with_shared_checksums(shared_benchmarks):
    sums = dict(reversed(line.split()) for line in (shared_benchmarks / "SHA256SUMS").read_text().splitlines())
    readme = (shared_benchmarks / "README.md").read_text()
    fixed = {s.dest: s for s in dl.SOURCES if s.sha256}
    assert set(fixed) == set(sums)
    for dest, src in fixed.items():
        assert src.sha256 == sums[dest]
        m = re.fullmatch(r"https://raw\.githubusercontent\.com/([^/]+/[^/]+)/([0-9a-f]{12,40})/data/(.+)", src.url)
        assert m, src.url
        repo, commit, path = m.groups()
        assert f"{repo} @ {commit[:12]}" in readme
        # full 40-character hashes, except VISLA's, which could not be established (documented)
        assert len(commit) == 40 or (repo == "Sri-Harsha/visla_benchmark" and "full hash" in dl.__doc__)
        assert path == Path(dest).name


def test_every_benchmark_has_sources_and_archives_need_the_flag():
    for bench in ("visla", "sugarcrepe", "sugarcrepe_pp", "bivlc", "aro", "retrieval", "zeroshot",
                  "visla_lexical", "left_right"):
        assert dl.sources_for([bench], images=True), bench
    assert not any(s.images for s in dl.sources_for(["visla"], images=False))
    assert any(s.url.endswith("val2017.zip") for s in dl.sources_for(["sugarcrepe"], images=True))
    hf = [s for s in dl.SOURCES if s.kind == "hf"]
    assert hf and re.fullmatch(r"[0-9a-f]{40}", dl.BIVLC_REVISION)
    with pytest.raises(KeyError):
        dl.sources_for(["nope"], images=False)


def test_download_via_file_urls_verifies_and_refetches(tmp_path, shared_benchmarks):
    good = shared_benchmarks / "visla" / "Generic_VISLA.tsv"
    src = dl.Source("visla", "visla/Generic_VISLA.tsv", good.as_uri(), sha256=dl.SHA256["visla/Generic_VISLA.tsv"])
    root = tmp_path / "root"
    dl.download(["visla"], root, sources=[src])
    out = root / "visla" / "Generic_VISLA.tsv"
    assert out.read_bytes() == good.read_bytes()
    out.write_text("corrupted")  # a present but corrupt file is fetched again
    dl.download(["visla"], root, sources=[src])
    assert hashlib.sha256(out.read_bytes()).hexdigest() == src.sha256

    bad = dl.Source("visla", "visla/Spatial_VISLA.tsv", good.as_uri(), sha256=dl.SHA256["visla/Spatial_VISLA.tsv"])
    with pytest.raises(RuntimeError, match="sha256 .* != expected"):
        dl.download(["visla"], root, sources=[bad])
    assert not (root / "visla" / "Spatial_VISLA.tsv").exists()  # nothing half-written is left


def test_zip_archives_unpack_via_monkeypatched_fetch(tmp_path, monkeypatch):
    import zipfile
    archive = tmp_path / "val2017.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("val2017/000000000001.jpg", b"jpeg bytes")
    calls = []

    def fake_fetch(url, dest, desc=None):
        calls.append(url)
        Path(dest).write_bytes(archive.read_bytes())
    monkeypatch.setattr(dl, "fetch", fake_fetch)
    src = dl.Source("sugarcrepe", "coco", dl.COCO.format("val2017"), "zip", images=True)
    dl.download(["sugarcrepe"], tmp_path / "root", sources=[src])
    dl.download(["sugarcrepe"], tmp_path / "root", sources=[src])  # second time: already unpacked
    assert (tmp_path / "root" / "coco" / "val2017" / "000000000001.jpg").read_bytes() == b"jpeg bytes"
    assert calls == ["http://images.cocodataset.org/zips/val2017.zip"]


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_downloaded_files_and_records_honour_the_umask(tmp_path, shared_benchmarks, umask):
    """A fetched file and the checksum record get the mode a plain open() gives (0666 less the
    umask), not mkstemp's 0600: teammates sharing a data root can read them."""
    import os
    good = shared_benchmarks / "visla" / "Generic_VISLA.tsv"
    src = dl.Source("visla", "visla/Generic_VISLA.tsv", good.as_uri(), sha256=dl.SHA256["visla/Generic_VISLA.tsv"])
    root = tmp_path / "root"
    old = os.umask(umask)
    try:
        dl.download(["visla"], root, sources=[src])
    finally:
        os.umask(old)
    for path in (root / "visla" / "Generic_VISLA.tsv", root / "recorded_checksums.json"):
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path
