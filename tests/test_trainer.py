"""train.py end to end on tiny fixture shards (single process, in-process): recipe errors, eval
metrics in TensorBoard and eval.jsonl, checkpoints open_clip loads, NaN stop, best pointer."""
import json
import sys
import types

import open_clip
import pytest
import torch

from compclip.trainer import train
from tests.fixtures.trainer_data import train_in_process as run, write_fixture_shards

RECIPE = """
name: tiny
seed: 3
model: {{arch: micro-vit-32}}
data: {{train_shards: ["{shards}"], samples_per_epoch: 32, batch_size: 8, workers: 0, shuffle_buffer: 16,
        partner: generated}}
negatives: {{per_image: 2}}
optim: {{lr: 1.0e-3, grad_clip: 1.0}}
schedule: {{epochs: 2, warmup_steps: 1}}
logging: {{output_dir: "{out}", every_n_steps: 1, progress: false}}
checkpoint: {{keep_last: 1}}
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_fixture_shards(tmp_path_factory.mktemp("tr") / "set", n=48, partner="generated")


@pytest.fixture
def recipe(tmp_path, shards):
    path = tmp_path / "tiny.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    return path


@pytest.fixture
def fake_eval(monkeypatch):
    """Stands in for eval.api (owned by the eval engineer): scores with the real scorer."""
    calls = []

    def evaluate(scorer, benchmarks, data_root, options, progress=True):
        from PIL import Image
        img = scorer.encode_images([Image.new("RGB", (32, 32), (200, 0, 0))])
        txt = scorer.encode_texts(["a red square", "a blue square"])
        calls.append((scorer, benchmarks, data_root, options))
        sims = (img @ txt.T)[0]
        return {f"{b}/acc": float(sims[0] > sims[1]) for b in benchmarks} | {"fake/margin": float(sims[0] - sims[1])}

    module = types.ModuleType("compclip.eval.api")
    module.evaluate = evaluate
    monkeypatch.setitem(sys.modules, "compclip.eval.api", module)
    return calls


def test_bad_recipe_exits_2_with_one_line(recipe, capsys):
    assert run([recipe, "optim.lrr=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "unknown key 'optim.lrr' (did you mean 'optim.lr'?)" in err


def test_recipe_shards_mismatch_exits_2_naming_set_and_key(recipe, shards, capsys):
    assert run([recipe, "data.partner=neighbour"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(shards) in err and "features.neighbours" in err


def test_missing_eval_api_fails_before_training(recipe, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "compclip.eval.api", None)  # import fails
    assert run([recipe, "eval.benchmarks=[fake]"]) == 2
    assert "compclip.eval.api" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_end_to_end_eval_metrics_in_tensorboard(recipe, tmp_path, fake_eval):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    assert run([recipe, "eval.benchmarks=[fake]", "eval.data_root=/nowhere",
                "checkpoint.best_metric=eval/fake/margin"]) == 0
    run_dir = tmp_path / "runs" / "tiny"
    assert len(fake_eval) == 2 and fake_eval[0][1:3] == (["fake"], "/nowhere")
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"eval/fake/acc", "eval/fake/margin", "train/loss", "train/lr", "train/logit_scale",
            "train/samples_per_s", "train/memory_mb"} <= tags
    assert [e.step for e in events.Scalars("eval/fake/acc")] == [4, 8]
    lines = [json.loads(l) for l in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert [l["epoch"] for l in lines] == [1, 2] and "fake/margin" in lines[0]["metrics"]
    ckpts = run_dir / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step-0000008.pt"
    best = (ckpts / "best").read_text().strip()
    assert (ckpts / best).is_file()  # the best survives keep_last=1
    meta = json.loads((ckpts / "step-0000008.json").read_text())
    assert meta["step"] == 8 and meta["epoch"] == 2 and "fake/margin" in meta["metrics"]
    # plain open_clip loads the weights with identical outputs
    model, _, _ = open_clip.create_model_and_transforms("micro-vit-32", pretrained=str(ckpts / "step-0000008.pt"))
    state = torch.load(ckpts / "step-0000008.pt")["state_dict"]
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())


def test_nan_loss_stops_naming_step_and_keys(recipe, capsys):
    assert run([recipe, "loss.logit_scale_init=.nan"]) == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "loss is nan at step 1 (epoch 0); batch sample keys: s" in err


def test_too_few_samples_for_a_step_exits_2(recipe, capsys):
    assert run([recipe, "data.samples_per_epoch=4"]) == 2
    assert "less than one step" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # optimizer.step is stubbed
def test_accumulation_with_feature_cache_equals_big_batch(tmp_path, shards):
    """accum_steps=2 x batch 4 gives the same loss and gradients as batch 8 on the same 8 samples."""
    import copy
    from compclip.trainer.recipe import load_recipe
    from compclip.trainer.data import resolve_sources
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    results = []
    for overrides in (["data.batch_size=8"], ["data.batch_size=4", "optim.accum_steps=2"]):
        rec = load_recipe(path, overrides + ["optim.grad_clip=null", "schedule.warmup_steps=0"])
        try:
            tr = train.Trainer(rec, resolve_sources(rec.data.train_shards))
            comp = tr.stream.composer
            items = [comp.item(raw, __import__("random").Random(i)) for i, raw in enumerate(_raws(shards, 8))]
            big = copy.deepcopy(comp)
            big.batch_size = 8
            whole = big.collate(items)
            batches = [whole] if rec.optim.accum_steps == 1 else [comp.collate(items[:4]), comp.collate(items[4:])]
            # same samples, ordered so the global feature order matches: [a0-3, p0-3 | a4-7, p4-7] vs
            # [a0-7, p0-7]; the loss does not depend on column order
            tr.optimizer.step = tr.optimizer.zero_grad = lambda *a, **k: None  # keep the gradients
            loss = tr.step(batches)
            results.append((loss, {n: p.grad.clone() for n, p in tr.model.named_parameters()}))
        finally:
            from accelerate.state import AcceleratorState, GradientState
            AcceleratorState._reset_state(reset_partial_state=True)
            GradientState._reset_state()
    (loss_a, w_a), (loss_b, w_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    for k in w_a:
        torch.testing.assert_close(w_a[k], w_b[k], rtol=1e-4, atol=1e-6, msg=k)
    assert w_a['logit_scale'].abs() > 0  # counted once, not accum_steps times


def _raws(shards, n):
    from compclip.shardset.shards import iter_raw_samples
    return list(iter_raw_samples(sorted(shards.glob("*.tar"))[0]))[:n]


def test_too_much_bad_data_stops_with_exit_3(tmp_path, capsys):
    bad = write_fixture_shards(tmp_path / "bad", n=32, partner="generated", corrupt=8)
    path = tmp_path / "bad.yaml"
    path.write_text(RECIPE.format(shards=bad, out=tmp_path / "runs"))
    assert run([path, "data.max_bad_fraction=0.05"]) == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "above data.max_bad_fraction=0.05; last: sample 's" in err and "cannot decode image" in err


def test_end_to_end_with_the_real_eval_api(recipe, tmp_path):
    """The real eval.api on tests.fixtures.eval_data's tiny data root: metrics land in TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    synthetic = pytest.importorskip("tests.fixtures.eval_data")
    pytest.importorskip("compclip.eval.api")
    root = synthetic.make_data_root(tmp_path / "bench")
    assert run([recipe, "eval.benchmarks=[sugarcrepe, visla]", f"eval.data_root={root}", "schedule.epochs=1",
                "checkpoint.best_metric=eval/sugarcrepe/macro"]) == 0
    run_dir = tmp_path / "runs" / "tiny"
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"eval/sugarcrepe/macro", "eval/visla/generic/i2t"} <= tags
    line = json.loads((run_dir / "eval.jsonl").read_text().splitlines()[0])
    assert 0.0 <= line["metrics"]["sugarcrepe/macro"] <= 1.0
    assert (run_dir / "checkpoints" / "best").is_file()


def test_interval_half_widths_beside_each_metric_and_the_best_within_noise(recipe, tmp_path, capsys):
    """eval_ci/<name> in TensorBoard, the intervals in eval.jsonl and the per-item values in
    eval_items/ every epoch; best.json and the last line say which other evaluations the best
    one's 95 % interval overlaps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tests.fixtures.eval_data import make_data_root
    root = make_data_root(tmp_path / "bench")
    assert run([recipe, "eval.benchmarks=[sugarcrepe]", f"eval.data_root={root}",
                "checkpoint.best_metric=eval/sugarcrepe/macro"]) == 0
    run_dir = tmp_path / "runs" / "tiny"
    lines = [json.loads(l) for l in (run_dir / "eval.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    half = events.Scalars("eval_ci/sugarcrepe/macro")
    assert [e.step for e in half] == [l["step"] for l in lines] == [4, 8]
    from compclip.eval.stats import intervals, load_tables
    from compclip.trainer.evaluation import items_path
    for line, event in zip(lines, half):
        lo, hi = line["intervals"]["sugarcrepe/macro"]
        assert lo <= line["metrics"]["sugarcrepe/macro"] <= hi
        assert event.value == pytest.approx((hi - lo) / 2)
        # each evaluation's per-item values are kept: they give its numbers and intervals again
        table = load_tables(items_path(run_dir, line["step"]))["sugarcrepe"]
        assert table.metrics["macro"].point() == pytest.approx(line["metrics"]["sugarcrepe/macro"])
        assert list(intervals(table)["macro"]) == pytest.approx([lo, hi])
    choice = json.loads((run_dir / "best.json").read_text())
    best = (run_dir / "checkpoints" / "best").read_text().strip()
    assert best == f"step-{choice['step']:07d}.pt" and choice["metric"] == "sugarcrepe/macro"
    other = next(l for l in lines if l["step"] != choice["step"])
    (lo, hi), (olo, ohi) = choice["interval"], other["intervals"]["sugarcrepe/macro"]
    overlap = olo <= hi and ohi >= lo
    assert [o["step"] for o in choice["within_noise_of"]] == ([other["step"]] if overlap else [])
    captured = capsys.readouterr()
    assert "sugarcrepe/macro" in captured.err and " ±" in captured.err and "best checkpoint so far: step" in captured.err
    assert ("within noise of step(s)" in captured.out) == overlap


def test_within_noise_reads_the_eval_log(tmp_path):
    from compclip.trainer.evaluation import noise_line, within_noise
    log = tmp_path / "eval.jsonl"
    rows = [(4, 1, 0.60, [0.55, 0.67]), (8, 2, 0.70, [0.66, 0.74]), (12, 3, 0.80, [0.75, 0.84])]
    log.write_text("".join(json.dumps({"step": s, "epoch": e, "metrics": {"b/m": v, "val/loss": 1.0},
                                       "intervals": {"b/m": i}}) + "\n" for s, e, v, i in rows) + '{"step": 1')
    choice = within_noise(log, "b/m", 12)
    assert choice["value"] == 0.80 and choice["interval"] == [0.75, 0.84] and choice["epoch"] == 3
    assert choice["within_noise_of"] == []  # 0.74 < 0.75: no overlap
    assert "overlaps no other evaluation's" in noise_line(choice)
    assert [o["step"] for o in within_noise(log, "b/m", 8)["within_noise_of"]] == [4]  # 0.67 >= 0.66
    assert "within noise of step 4 (epoch 1): their 95 % intervals overlap" in noise_line(within_noise(log, "b/m", 8))
    assert within_noise(log, "val/loss", 12) is None and within_noise(log, "b/m", 5) is None
    assert within_noise(tmp_path / "absent.jsonl", "b/m", 12) is None


@pytest.mark.slow
def test_compiled_model_trains_a_step_like_the_eager_one(tmp_path, shards):
    """model.compile: one optimiser step on the same batch gives the eager loss and parameters."""
    from compclip.trainer.data import resolve_sources
    from compclip.trainer.recipe import load_recipe
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    results = []
    for compiled in (False, True):
        rec = load_recipe(path, [f"model.compile={str(compiled).lower()}", "schedule.warmup_steps=0"])
        try:
            tr = train.Trainer(rec, resolve_sources(rec.data.train_shards))
            comp = tr.stream.composer
            batch = comp.collate([comp.item(raw, __import__("random").Random(i)) for i, raw in enumerate(_raws(shards, 8))])
            loss = tr.step([batch])
            results.append((loss, {n: p.detach().clone() for n, p in tr.model.named_parameters()}))
        finally:
            from accelerate.state import AcceleratorState, GradientState
            AcceleratorState._reset_state(reset_partial_state=True)
            GradientState._reset_state()
    (eager, w_eager), (compiled, w_compiled) = results
    assert compiled == pytest.approx(eager, rel=1e-4)
    for name, value in w_eager.items():
        torch.testing.assert_close(w_compiled[name], value, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("per_image, per_partner, padding", [(2, 1, 1 / 3), (1, 1, 0.0), (0, 0, None)])
def test_negative_padding_is_logged_every_step(tmp_path, per_image, per_partner, padding):
    """Every sample has one swap; with 2 anchor columns each, 8 of a step's 16 anchor columns are
    padding and none of its 8 neighbour columns: 1/3. No negative columns: not logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from compclip.shardset.schema import Negative
    from tests.fixtures.trainer_data import write_negative_shards
    shards = write_negative_shards(tmp_path / "set", [[Negative(f"neg {i}", "swap", "noun")] for i in range(32)],
                                   neighbours=1)
    path = tmp_path / "tiny.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    assert run([path, "data.partner=neighbour", "data.samples_per_epoch=16", "schedule.epochs=1",
                f"negatives.per_image={per_image}", f"negatives.per_partner={per_partner}"]) == 0
    events = EventAccumulator(str(tmp_path / "runs" / "tiny" / "tensorboard"))
    events.Reload()
    if padding is None:
        assert "train/negative_padding" not in events.Tags()["scalars"]
        return
    logged = events.Scalars("train/negative_padding")
    assert [e.step for e in logged] == [1, 2] and all(e.value == pytest.approx(padding) for e in logged)


def test_negatives_rules_mismatch_exits_2_with_one_line(recipe, shards, capsys):
    assert run([recipe, "negatives.rules=negclip", "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(shards) in err
    assert "negatives.rules=negclip but the shard set's manifest.json has features.rules=compclip" in err


def test_preflight_warns_when_negative_columns_would_be_padding(recipe, capsys):
    """The fixture samples have 1 to 3 negatives, the first a swap: 2 per anchor leaves some
    columns empty (a warning, exit 0); 1 swap per anchor leaves none (no warning)."""
    assert run([recipe, "--check"]) == 0
    err = capsys.readouterr().err
    assert "warning: data.train_shards[0]" in err and "of the negative columns will be padding (48 samples read" in err
    assert "have fewer than negatives.per_image=2 eligible negatives under kinds=[swap, replace, add] subkinds=[all]" in err
    assert run([recipe, "--check", "negatives.per_image=1", "negatives.kinds=[swap]"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_evaluations_of_a_run_tokenize_each_benchmark_text_once(recipe, tmp_path, monkeypatch):
    """Two epochs, two evaluations of SugarCrepe: one cached tokenizer for the run
    (models/token_cache.py), each text through the model's tokenizer once."""
    import compclip.trainer.loop as loop
    from compclip.models.token_cache import CachedTokenizer
    from tests.fixtures.eval_data import make_data_root
    made, tokenized = [], []

    class Spy(CachedTokenizer):
        def __init__(self, tokenizer):
            made.append(self)

            def counting(texts, *a, **k):
                tokenized.extend(texts)
                return tokenizer(texts, *a, **k)
            super().__init__(counting)
    monkeypatch.setattr(loop, "CachedTokenizer", Spy)
    root = make_data_root(tmp_path / "bench")
    assert run([recipe, "eval.benchmarks=[sugarcrepe]", f"eval.data_root={root}", "schedule.epochs=2"]) == 0
    lines = (tmp_path / "runs" / "tiny" / "eval.jsonl").read_text().splitlines()
    assert len(lines) == 2 and len(made) == 1
    assert tokenized and len(tokenized) == len(set(tokenized))
