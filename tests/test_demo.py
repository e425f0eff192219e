"""The offline demo's bookkeeping (launch/demo.py): commands it runs and the summary it writes.
The demo itself runs the trainer, whose recipes have 2-step smoke runs in test_recipes.py."""
from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("demo", ROOT / "launch" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(**kw):
    base = dict(samples=0, epochs=0, bench_scale=1.0,
                recipes=["demo_clip_ft", "demo_negclip", "demo_trohn_text", "demo_trohn_img"])
    base.update(kw)
    return argparse.Namespace(**base)


def _write_evals(seed, recipe: str, values: list[float]) -> None:
    run = seed.runs / recipe
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "eval.jsonl", "w") as handle:
        for epoch, v in enumerate(values, 1):
            handle.write(json.dumps({"step": epoch, "epoch": epoch, "metrics": {"sugarcrepe/swap": v}}) + "\n")


def test_train_commands_point_at_the_seed_folders(demo, tmp_path):
    seed = demo.Seed(tmp_path, 3, _args(samples=128, epochs=1))
    cmd = seed.train_cmd("demo_trohn_img")
    assert cmd[1:3] == ["trainer/train.py", "recipes/demo_trohn_img.yaml"]
    assert "seed=3" in cmd and "data.samples_per_epoch=128" in cmd and "schedule.epochs=1" in cmd
    assert f"data.train_shards=[{tmp_path / 'seed-3' / 'world' / 'train_generated'}]" in cmd
    assert f"model.pretrained={tmp_path / 'seed-3' / 'pretrained.pt'}" in cmd
    assert not any(c.startswith("model.pretrained=") for c in seed.train_cmd("demo_pretrain"))
    for recipe in demo.FINETUNES + ("demo_pretrain",):
        assert (ROOT / "recipes" / f"{recipe}.yaml").is_file()


def test_summary_uses_the_last_epoch_and_differences_to_the_control(demo, tmp_path):
    seeds = [demo.Seed(tmp_path, s, _args()) for s in (0, 1)]
    for seed, (control, img) in zip(seeds, [(0.50, 0.60), (0.54, 0.58)]):
        for recipe in demo.FINETUNES + ("demo_pretrain",):
            last = img if recipe == "demo_trohn_img" else control
            _write_evals(seed, recipe, [0.1, last])  # the first epoch must not count
    summary = demo.summarise(seeds)
    row = summary["recipes"]["demo_trohn_img"]["sugarcrepe/swap"]
    assert row["values"] == [0.60, 0.58]
    assert row["mean"] == pytest.approx(0.59)
    assert row["delta_mean"] == pytest.approx((0.10 + 0.04) / 2)
    assert row["delta_std"] == pytest.approx(0.0424264, abs=1e-6)
    assert summary["recipes"]["demo_clip_ft"]["sugarcrepe/swap"]["delta_mean"] == pytest.approx(0.0)
    text = demo.markdown(summary, "bash launch/demo.sh --seeds 0 1", 1.0)
    assert "| TROHN-Img-style | " in text and "+7.0 ± 4.2" in text and "59.0 ± 1.4" in text
    assert "–" in text  # metrics no run reported are shown as missing, not as 0


def test_a_subset_of_finetunes_runs_and_is_summarised_alone(demo, tmp_path):
    seed = demo.Seed(tmp_path, 0, _args(recipes=["demo_clip_ft", "demo_trohn_text"]))
    assert [r for r, _ in seed.finetunes()] == ["demo_trohn_text", "demo_clip_ft"]  # costliest first
    for recipe in ("demo_pretrain", "demo_clip_ft", "demo_trohn_text"):
        _write_evals(seed, recipe, [0.5, 0.6 if recipe == "demo_trohn_text" else 0.55])
    summary = demo.summarise([seed], ("demo_clip_ft", "demo_trohn_text"))
    assert list(summary["recipes"]) == ["demo_pretrain", "demo_clip_ft", "demo_trohn_text"]
    text = demo.markdown(summary, "bash launch/demo.sh --recipes demo_trohn_text", 1.0)
    assert "| TROHN-Text-style | " in text and "+5.0" in text and "NegCLIP" not in text
