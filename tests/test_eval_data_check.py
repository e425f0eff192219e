"""Data checks before any model loads: every problem of every benchmark in one message, ARO
without Flickr30k images, and the checksums recorded at download."""
import json
import shutil

import pytest
import torch

from compclip.eval import checksums
from compclip.eval import download as dl
from compclip.eval.api import check_data, missing_data, run
from compclip.eval.benchmarks.base import MissingData
from compclip.eval.cli import main
from compclip.eval.registry import list_benchmarks
from compclip.eval.scorer import Scorer
from tests.fixtures.eval_data import make_data_root


class Counting(Scorer):
    """Fixed tiny embeddings; counts every encoder call."""
    name = "counting"

    def __init__(self):
        self.calls = 0

    def encode_texts(self, texts):
        self.calls += 1
        return torch.nn.functional.normalize(torch.tensor([[1.0, len(t) % 7, 1.0] for t in texts]), dim=-1)

    def encode_images(self, images):
        self.calls += 1
        return torch.nn.functional.normalize(torch.tensor([[1.0, im.size[0] % 5, 2.0] for im in images]), dim=-1)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_data_root(tmp_path_factory.mktemp("check") / "data", n=4, seed=2)


def test_empty_root_lists_every_suite_in_one_message(tmp_path):
    empty = tmp_path / "empty"
    lines = missing_data(list_benchmarks(), empty)
    text = "\n".join(lines)
    for bench in ("visla", "sugarcrepe:", "sugarcrepe_pp", "bivlc", "aro/vg_relation", "aro/vg_attribution",
                  "aro/coco_order", "retrieval/coco", "zeroshot/cifar10", "zeroshot/cifar100", "visla_lexical",
                  "left_right"):
        assert bench in text, bench
    assert f"python -m eval download --benchmarks visla --data-root {empty} --images" in text
    assert "flickr30k" not in text and "imagenet" not in text  # manual parts are not missing unless asked for
    assert all(" -> " in line for line in lines) and len(lines) < 15  # one line per problem, grouped
    with pytest.raises(MissingData) as err:
        check_data(list_benchmarks(), empty)
    msg = str(err.value)
    assert isinstance(err.value, ValueError) and all(line in msg for line in lines)
    commands = [line.strip() for line in msg.splitlines() if line.strip().startswith("python -m eval download")]
    with_images = next(c for c in commands if c.endswith(f"--data-root {empty} --images"))
    assert set(with_images.split()[5].split(",")) == {"visla", "sugarcrepe", "sugarcrepe_pp", "aro", "retrieval"}
    assert f"python -m eval download --benchmarks bivlc,zeroshot --data-root {empty}" in commands
    assert "aro/flickr30k_order skipped" in msg and "forms.illinois.edu" in msg  # said, but not required
    # a text-only scorer needs no images and skips image-only benchmarks
    text_only = missing_data(["visla", "sugarcrepe", "bivlc"], empty, require_images=False)
    assert len(text_only) == 1 and text_only[0].startswith("visla:") and "--images" not in text_only[0]


def test_cli_reports_all_before_loading_any_model(tmp_path, monkeypatch, capsys):
    from compclip import models
    from compclip.eval.scorer import SentenceTransformerScorer

    def must_not_load(*a, **k):
        raise AssertionError("a model was loaded before the data check")
    monkeypatch.setattr(models, "load_model", must_not_load)
    monkeypatch.setattr(SentenceTransformerScorer, "minilm", classmethod(must_not_load))
    rc = main(["score", "--model", "ViT-B-32", "--pretrained", "openai", "--text-model", "minilm",
               "--benchmarks", "visla,sugarcrepe,sugarcrepe_pp,bivlc,aro",
               "--data-root", str(tmp_path / "empty"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    for bench in ("visla", "sugarcrepe", "sugarcrepe_pp", "bivlc", "aro/vg_relation"):
        assert f"\n  {bench}" in err, bench
    assert err.startswith("error: benchmark data missing under") and "fetch everything that can be fetched with" in err
    # bad input is one line and exit 2 too
    assert main(["score", "--text-model", "minilm", "--benchmarks", "nope", "--data-root", str(tmp_path)]) == 2
    assert "error: unknown benchmark 'nope'; known: aro, bivlc" in capsys.readouterr().err
    assert main(["score", "--text-model", "minilm", "--benchmarks", "visla", "--data-root", str(tmp_path),
                 "--options", "{bad"]) == 2
    assert "--options is not valid JSON" in capsys.readouterr().err


def test_run_checks_every_benchmark_before_encoding(root, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(root, partial)
    shutil.rmtree(partial / "sugarcrepe")
    (partial / "aro" / "visual_genome_attribution.json").unlink()
    scorer = Counting()
    with pytest.raises(MissingData) as err:
        run(scorer, ["visla", "sugarcrepe", "aro"], str(partial), progress=False, reuse=False)
    assert scorer.calls == 0  # visla came first and was complete, yet nothing was encoded
    assert "sugarcrepe: 7 files not found" in str(err.value) and "visual_genome_attribution.json" in str(err.value)


def test_aro_without_flickr_images_is_skipped_with_a_note(root, tmp_path):
    no_flickr = tmp_path / "no_flickr"
    shutil.copytree(root, no_flickr)
    shutil.rmtree(no_flickr / "aro" / "flickr30k_images")
    assert missing_data(["aro", "retrieval"], no_flickr) == []  # not missing: skipped
    r = run(Counting(), ["aro", "retrieval"], str(no_flickr), progress=False, reuse=False)
    assert "vg_relation/macro" in r["aro"].headline and "coco_order/mean" in r["aro"].headline
    assert not any(k.startswith("flickr30k_order") for k in r["aro"].headline)
    note = next(n for n in r["aro"].notes if n.startswith("aro/flickr30k_order skipped"))
    assert "sign-up" in note and str(no_flickr / "aro/flickr30k_images/flickr30k-images") in note and "\n" not in note
    assert "coco/i2t_r1" in r["retrieval"].headline and not any("flickr30k" in k for k in r["retrieval"].headline)
    # asked for explicitly, its absence is an error naming the manual step
    explicit = {"aro": {"parts": ["vg_relation", "flickr30k_order"]}}
    lines = missing_data(["aro"], no_flickr, explicit)
    assert len(lines) == 1 and lines[0].startswith("aro/flickr30k_order: 4 image(s) not found")
    assert "forms.illinois.edu" in lines[0] and "python -m eval download" not in lines[0]
    with pytest.raises(MissingData, match="flickr30k_order"):
        run(Counting(), ["aro"], str(no_flickr), options=explicit, progress=False, reuse=False)
    # with its images there, the default scores it
    assert any(k.startswith("flickr30k_order") for k in
               run(Counting(), ["aro"], str(root), progress=False, reuse=False)["aro"].headline)


def test_download_records_checksums_and_later_use_catches_a_change(tmp_path, shared_benchmarks):
    good = shared_benchmarks / "visla" / "Generic_VISLA.tsv"
    spatial = shared_benchmarks / "visla" / "Spatial_VISLA.tsv"
    # as a Google Drive file: no pinned checksum
    sources = [dl.Source("visla", "visla/Generic_VISLA.tsv", good.as_uri()),
               dl.Source("visla", "visla/Spatial_VISLA.tsv", spatial.as_uri())]
    data = tmp_path / "root"
    dl.download(["visla"], data, sources=sources)
    rec = json.loads((data / checksums.RECORD).read_text())["files"]
    assert rec["visla/Generic_VISLA.tsv"]["sha256"] == checksums.digest(good)
    assert rec["visla/Generic_VISLA.tsv"]["size"] == good.stat().st_size
    assert missing_data(["visla"], data, require_images=False) == []

    target = data / "visla" / "Generic_VISLA.tsv"
    target.write_bytes(good.read_bytes()[:-100])  # truncated
    lines = missing_data(["visla"], data, require_images=False)
    assert len(lines) == 1 and str(target) in lines[0] and "truncated" in lines[0] and "--force" in lines[0]
    target.write_bytes(good.read_bytes().replace(b"bus", b"car", 1))  # same size, edited
    lines = missing_data(["visla"], data, require_images=False)
    assert len(lines) == 1 and str(target) in lines[0] and "changed since it was downloaded" in lines[0]

    dl.download(["visla"], data, sources=sources)  # a later download repairs it against the record
    assert target.read_bytes() == good.read_bytes() and missing_data(["visla"], data, require_images=False) == []
    upstream_changed = [dl.Source("visla", "visla/Generic_VISLA.tsv", spatial.as_uri())]
    with pytest.raises(RuntimeError, match="differs from .* recorded at its first download"):
        dl.download(["visla"], data, force=True, sources=upstream_changed)
    assert target.read_bytes() == good.read_bytes()  # the good file is kept


def test_archive_checksum_recorded_and_a_changed_archive_refused(tmp_path, monkeypatch):
    import zipfile
    archive = tmp_path / "images.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("images/1.jpg", b"one")
    payload = {"bytes": archive.read_bytes()}
    monkeypatch.setattr(dl, "fetch", lambda url, dest, desc=None: dest.write_bytes(payload["bytes"]))
    src = dl.Source("aro", "aro", dl.DRIVE.format("x"), "zip", images=True)
    data = tmp_path / "root"
    dl.download(["aro"], data, sources=[src])
    assert json.loads((data / checksums.RECORD).read_text())["archives"][src.url]["sha256"] == checksums.digest(archive)
    payload["bytes"] = archive.read_bytes() + b"x"
    with pytest.raises(RuntimeError, match="recorded at its first download"):
        dl.download(["aro"], data, force=True, sources=[src])
