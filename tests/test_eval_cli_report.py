"""CLI (`python -m eval score/list`) and reports (JSON, Markdown, radar and bar charts)."""
import json

import pytest

from compclip.eval.cli import main
from tests.fixtures.eval_data import make_data_root


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_data_root(tmp_path_factory.mktemp("cli") / "data", n=4, seed=1)


def test_score_two_models_side_by_side(root, tmp_path, capsys):
    out = tmp_path / "reports"
    rc = main(["score", "--model", "micro-vit-32", "--pretrained", "none",
               "--model", "micro-vit-32", "--pretrained", "none", "--label", "a", "--label", "b",
               "--benchmarks", "visla,sugarcrepe,bivlc,aro", "--data-root", str(root),
               "--out", str(out), "--per-instance", "--quiet",
               "--options", json.dumps({"aro": {"parts": ["vg_relation", "vg_attribution"]}})])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"a", "b"} and "sugarcrepe/macro" in summary["a"] and "aro/vg_relation/macro" in summary["b"]
    detail = json.loads((out / "a.json").read_text())["benchmarks"]
    assert detail["bivlc"]["instances"] and "replace/object" in detail["bivlc"]["categories"]
    md = (out / "results.md").read_text()
    assert "| metric | a | b |" in md and "| sugarcrepe/macro |" in md
    for png in ("radar.png", "categories_sugarcrepe.png", "categories_aro.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "a\tsugarcrepe/macro\t" in capsys.readouterr().out


def test_score_needs_one_pretrained_per_model(root, capsys):
    assert main(["score", "--model", "micro-vit-32", "--model", "micro-vit-32", "--pretrained", "none",
                 "--benchmarks", "visla", "--data-root", str(root)]) == 2
    assert "error: 2 --model but 1 --pretrained; give one --pretrained per --model" in capsys.readouterr().err


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "sugarcrepe_pp" in out and "left_right" in out
