"""The trainer feeds the loss what the papers did: exact-pass epochs with a validation hold-out
that selects the best checkpoint, in-batch numbers in TensorBoard, a temperature that moves from
OpenAI's stored value, and every pre-flight refusal (evaluation data, overlap with evaluation
images, another run's checkpoints) before any model is built."""
import json
import sys
import types

import pytest
import torch

from tests.fixtures.trainer_data import train_in_process as run, write_fixture_shards

RECIPE = """
name: fid
seed: 1
model: {{arch: micro-vit-32}}
data: {{train_shards: ["{shards}"], sampling: exact, batch_size: 8, workers: 0, val_fraction: 0.25,
        partner: generated}}
negatives: {{per_image: 1}}
optim: {{lr: 1.0e-3}}
schedule: {{epochs: 2, warmup_steps: 1}}
logging: {{output_dir: "{out}", every_n_steps: 1, progress: false}}
checkpoint: {{keep_last: 1, best_metric: val/hard_negative_acc}}
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_fixture_shards(tmp_path_factory.mktemp("fid") / "set", n=80, partner="generated",
                                captions_per_image=2)


@pytest.fixture
def recipe(tmp_path, shards):
    path = tmp_path / "fid.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    return path


def test_exact_epochs_validate_and_select_the_best_on_validation(recipe, tmp_path, shards):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from compclip.trainer.data import held_out
    from compclip.trainer.sample_index import SampleIndex
    assert run([recipe]) == 0
    run_dir = tmp_path / "runs" / "fid"
    lines = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2]
    for name in ("val/loss", "val/i2t_acc", "val/t2i_acc", "val/hard_negative_acc", "val/partner_acc"):
        assert 0.0 <= lines[0]["metrics"][name] <= (100 if name == "val/loss" else 1.0), name
    ckpts = run_dir / "checkpoints"
    best = json.loads((ckpts / (ckpts / "best").read_text().strip()).with_suffix(".json").read_text())
    assert best["metrics"]["val/hard_negative_acc"] == max(l["metrics"]["val/hard_negative_acc"] for l in lines)
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss_i2t", "train/loss_t2i", "train/masked_pairs", "train/i2t_acc", "train/t2i_acc",
            "train/hard_negative_acc", "train/partner_acc", "val/loss", "val/hard_negative_acc"} <= tags
    # 80 samples, 40 images of 2 captions; some images validate, the rest is one exact pass per epoch
    held = int(held_out(SampleIndex.load(shards).group, 0.25).sum())
    assert 0 < held < 80 and held % 2 == 0
    steps = [e.step for e in events.Scalars("train/loss")]
    assert steps == list(range(1, 2 * ((80 - held) // 8) + 1))
    # two captions of one image can share a batch: the mask counted them at some step
    assert any(e.value > 0 for e in events.Scalars("train/masked_pairs"))


def test_the_temperature_moves_from_openais_stored_value(recipe, tmp_path):
    """OpenAI's weights store s = 4.6055 (exp 100.04): with the clamp only on the parameter after
    each step, the gradient reaches s, and on a random model it asks for a lower scale."""
    assert run([recipe, "loss.logit_scale_init=4.6055", "optim.lr=1.0e-2", "schedule.epochs=1",
                "data.val_fraction=0", "checkpoint.best_metric=null"]) == 0
    ckpt = tmp_path / "runs" / "fid" / "checkpoints"
    state = torch.load(ckpt / (ckpt / "latest").read_text().strip())["state_dict"]
    assert float(state["logit_scale"]) < 4.6051702 - 1e-3


def test_a_run_folder_with_checkpoints_is_not_overwritten_silently(recipe, tmp_path, capsys):
    assert run([recipe, "schedule.epochs=1"]) == 0
    before = sorted(p.name for p in (tmp_path / "runs" / "fid" / "checkpoints").iterdir())
    capsys.readouterr()
    assert run([recipe, "schedule.epochs=1"]) == 2
    err = capsys.readouterr().err
    assert "already holds checkpoints" in err and "checkpoint.resume=auto" in err and "checkpoint.overwrite=true" in err
    assert sorted(p.name for p in (tmp_path / "runs" / "fid" / "checkpoints").iterdir()) == before
    stale = tmp_path / "runs" / "fid" / "eval_items" / "step-0009999.items.npz"  # an earlier run's values
    stale.parent.mkdir()
    stale.write_bytes(b"")
    assert run([recipe, "schedule.epochs=1", "checkpoint.overwrite=true"]) == 0
    assert not stale.exists()
    assert len((tmp_path / "runs" / "fid" / "eval.jsonl").read_text().splitlines()) == 1


def test_the_checkpoint_is_written_before_the_evaluation(recipe, tmp_path, monkeypatch, capsys):
    module = types.ModuleType("compclip.eval.api")

    def evaluate(*args, **kwargs):
        raise RuntimeError("benchmark crashed")

    module.evaluate = evaluate
    monkeypatch.setitem(sys.modules, "compclip.eval.api", module)
    assert run([recipe, "schedule.epochs=1", "eval.benchmarks=[fake]", "eval.data_root=/nowhere"]) == 3
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: benchmark crashed"  # a fault, one line
    ckpts = tmp_path / "runs" / "fid" / "checkpoints"
    assert (ckpts / "latest").is_file()
    meta = json.loads((ckpts / (ckpts / "latest").read_text().strip()).with_suffix(".json").read_text())
    assert meta["epoch"] == 1 and meta["metrics"] == {}
    # resumed, the run evaluates that epoch first and records its metrics in the checkpoint's sidecar
    module.evaluate = lambda *args, **kwargs: {"fake/acc": 0.5}
    assert run([recipe, "schedule.epochs=1", "eval.benchmarks=[fake]", "eval.data_root=/nowhere",
                "checkpoint.resume=auto"]) == 0
    lines = (tmp_path / "runs" / "fid" / "eval.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["metrics"]["fake/acc"] == 0.5
    meta = json.loads((ckpts / (ckpts / "latest").read_text().strip()).with_suffix(".json").read_text())
    assert meta["metrics"]["fake/acc"] == 0.5


def test_missing_evaluation_data_is_listed_before_any_model_loads(recipe, tmp_path, monkeypatch, capsys):
    module = types.ModuleType("compclip.eval.api")

    class MissingData(ValueError):
        pass

    def check_data(benchmarks, data_root, options=None):
        raise MissingData(f"missing: {', '.join(benchmarks)} under {data_root}; fetch with python -m eval download")

    module.MissingData, module.check_data = MissingData, check_data
    module.evaluate = lambda *a, **k: pytest.fail("no evaluation may run")
    monkeypatch.setitem(sys.modules, "compclip.eval.api", module)
    from compclip import models
    monkeypatch.setattr("compclip.trainer.loop.load_model", lambda *a, **k: pytest.fail("no model may load"))
    assert models is not None
    assert run([recipe, "eval.benchmarks=[visla, aro]", "eval.data_root=/empty"]) == 2
    err = capsys.readouterr().err
    assert "missing: visla, aro under /empty" in err and "python -m eval download" in err
    assert not (tmp_path / "runs").exists()


def test_training_images_in_an_evaluation_set_refuse_to_start(tmp_path, monkeypatch, capsys):
    shards = write_fixture_shards(tmp_path / "coco", n=16, partner="generated")
    manifest = json.loads((shards / "manifest.json").read_text())
    manifest["image_ids"] = "image_ids.txt"
    (shards / "manifest.json").write_text(json.dumps(manifest))
    (shards / "image_ids.txt").write_text("\n".join(str(i) for i in range(100, 116)) + "\n")
    fake = types.ModuleType("compclip.shardset.benchmark_ids")
    fake.benchmark_coco_ids = lambda benchmarks, root: {"retrieval": {1, 2, 105, 107, 115}, "visla": {3}}
    monkeypatch.setitem(sys.modules, "compclip.shardset.benchmark_ids", fake)
    api = types.ModuleType("compclip.eval.api")
    api.evaluate = lambda *a, **k: {"retrieval/coco/i2t_r1": 0.5}
    monkeypatch.setitem(sys.modules, "compclip.eval.api", api)
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    args = [path, "eval.benchmarks=[retrieval, visla]", "eval.data_root=/b", "data.val_fraction=0",
            "schedule.epochs=1", "checkpoint.best_metric=null"]
    assert run(args) == 2
    err = capsys.readouterr().err
    assert "retrieval: 3 image(s)" in err and "visla" not in err.split("(")[1] and "eval.allow_overlap" in err
    assert run(args + ["eval.allow_overlap=true"]) == 0
    line = json.loads((tmp_path / "runs" / "fid" / "eval.jsonl").read_text().splitlines()[0])
    assert line["overlap"] == {"retrieval": 3}


def test_a_missing_shard_set_names_the_command_that_builds_it(recipe, capsys):
    assert run([recipe, "data.train_shards=[data/shards/coco_karpathy]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "shard set not found" in err and "prepare coco" in err


def test_the_real_eval_check_lists_every_missing_benchmark(recipe, tmp_path, capsys):
    """With eval.api's own check: an empty data root names every benchmark and the fetch commands."""
    (tmp_path / "empty").mkdir()
    assert run([recipe, "eval.benchmarks=[visla, sugarcrepe, aro]", f"eval.data_root={tmp_path / 'empty'}"]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in ("visla", "sugarcrepe", "aro")) and "python -m eval download" in err
    assert not (tmp_path / "runs").exists()


def test_exact_sampling_of_bare_tars_is_refused_before_any_model_loads(recipe, shards, capsys, monkeypatch):
    monkeypatch.setattr("compclip.trainer.loop.load_model", lambda *a, **k: pytest.fail("no model may load"))
    assert run([recipe, f'data.train_shards=["{shards}/shard-{{000000..000004}}.tar"]']) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "need a shard-set folder" in err
