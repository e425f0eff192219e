"""The offline demo's bookkeeping (launch/demo.py): commands it runs and the summary it writes.
The demo itself runs the trainer, whose recipes have 2-step smoke runs in test_recipes.py."""
from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _launch_module(name: str):
    """A launch/ script as a module, launch/ on the path as when it runs (demo.py imports
    demo_report)."""
    import sys
    if str(ROOT / "launch") not in sys.path:
        sys.path.insert(0, str(ROOT / "launch"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "launch" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo():
    return _launch_module("demo")


@pytest.fixture(scope="module")
def report():
    return _launch_module("demo_report")


def _args(**kw):
    base = dict(samples=0, epochs=0, bench_scale=1.0, arch="demo-vit-64", size=64, leftright_fraction=None, base="plain",
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


def test_another_architecture_reaches_every_step(demo, tmp_path):
    """`--arch demo-vit-96-wide --size 96` (docs/demo.md's larger-architecture run): the world is
    rendered at 96 px, every training step and the neighbour search use that model, and the
    NegCLIP data is not built when NegCLIP-style is not among the finetunes."""
    seed = demo.Seed(tmp_path, 0, _args(arch="demo-vit-96-wide", size=96,
                                        recipes=["demo_clip_ft", "demo_trohn_text"]))
    ran = []
    seed.run = lambda name, cmd, threads=2, step="": ran.append((name, cmd))
    seed.build_world()
    seed.negclip_data()
    world = ran[0][1]
    assert world[world.index("--size") + 1] == "96"
    assert [name for name, _ in ran] == ["world"]  # no swap negatives, no kNN
    for recipe in ("demo_pretrain", "demo_clip_ft", "demo_trohn_text"):
        assert "model.arch=demo-vit-96-wide" in seed.train_cmd(recipe)
    seed.args.recipes.append("demo_negclip")
    seed.negclip_data()
    knn = ran[-1][1]
    assert ran[-1][0] == "knn" and knn[knn.index("--arch") + 1] == "demo-vit-96-wide"
    default = demo.Seed(tmp_path, 1, _args())
    assert not any(c.startswith("model.arch=") for c in default.train_cmd("demo_clip_ft"))
    from compclip.models.registry import TINY_ARCHS
    assert "demo-vit-96-wide" in TINY_ARCHS


def test_leftright_fraction_reaches_the_world_build_only_when_given(demo, tmp_path):
    worlds = []
    for i, fraction in enumerate((None, 0.02)):
        seed = demo.Seed(tmp_path / str(i), 0, _args(leftright_fraction=fraction))
        seed.run = lambda name, cmd, threads=2, step="": worlds.append(cmd)
        seed.build_world()
    assert "--leftright-fraction" not in worlds[0]
    assert worlds[1][worlds[1].index("--leftright-fraction") + 1] == "0.02"
    assert worlds[1][:worlds[1].index("--leftright-fraction")] == [
        c.replace(str(tmp_path / "0"), str(tmp_path / "1")) for c in worlds[0]]


def test_layout_base_builds_its_world_and_trains_the_base_in_two_stages(demo, tmp_path):
    """`--base layout`, the default: two more worlds, `lock_world/` and `layout_world/`, get their
    options (a fraction given goes to both and still wins; `world/` is the plain demo's); the base
    trains the locked-text recipe on the first, then `demo_pretrain` for one epoch on the second
    from the first stage's last checkpoint; `demo_leftright` takes its pairs from `layout_world/`
    and every other training set from `world/`; `--base plain` runs `demo_pretrain` alone on the
    world's own mix."""
    import yaml
    from compclip.models.checkpoint import sidecar_path
    seed = demo.Seed(tmp_path / "layout", 0, _args(base="layout", recipes=list(demo.FINETUNES)))
    ran = []
    seed.run = lambda name, cmd, threads=2, step="": ran.append((name, cmd))
    seed.build_world()
    seed.build_layout_world()
    assert [name for name, _ in ran] == ["world", "lock_world", "layout_world"]
    main, lock, world = (cmd for _, cmd in ran)
    assert main[main.index("--out") + 1] == str(seed.world)
    assert lock[lock.index("--out") + 1] == str(seed.lock_world)
    assert world[world.index("--out") + 1] == str(seed.layout_world)
    assert main == demo.Seed(tmp_path / "layout", 0, _args()).world_cmd()  # the plain demo's world
    assert world[-len(demo.LAYOUT_WORLD):] == demo.LAYOUT_WORLD
    assert lock[-len(demo.LOCK_WORLD):] == demo.LOCK_WORLD
    assert "--object-couples" in world and "--object-pool" not in world and "--fixed-order" in world
    assert lock[lock.index("--object-pool") + 1] == "6" and "--object-couples" not in lock
    assert world[world.index("--mirrored-order") + 1] == "drawn" == lock[lock.index("--mirrored-order") + 1]
    given = demo.Seed(tmp_path / "given", 0, _args(base="layout", leftright_fraction=0.5))
    for kind in ("layout", "lock"):
        assert given.world_cmd(kind)[-2:] == ["--leftright-fraction", "0.5"]
    assert "--leftright-fraction" not in given.world_cmd()
    assert "layout world" in dict(seed.step_status())
    assert "layout world" not in dict(demo.Seed(tmp_path, 1, _args()).step_status())
    for recipe in demo.FINETUNES + ("demo_pretrain", demo.LOCKED):
        shards = [c for c in seed.train_cmd(recipe) if c.startswith("data.train_shards=")]
        expected = [(seed.lock_world if recipe == demo.LOCKED else seed.layout_world
                     if recipe == "demo_pretrain" or name == "train_mirrored" else seed.world) / name
                    for name in demo.TRAIN_SET[recipe]]
        assert shards == ["data.train_shards=[" + ",".join(map(str, expected)) + "]"], recipe
        assert f"eval.data_root={seed.world / 'benchmarks'}" in seed.train_cmd(recipe)
    assert seed.shards("demo_leftright") == [seed.world / "train", seed.layout_world / "train_mirrored"]
    first = seed.runs / demo.LOCKED / "checkpoints" / "step-0000640.pt"  # the first stage's last
    first.parent.mkdir(parents=True)
    first.write_bytes(b"")
    sidecar_path(first).write_text("{}")
    (first.parent / "latest").write_text(first.name + "\n")
    stage1, stage2 = seed.train_cmd(demo.LOCKED), seed.train_cmd("demo_pretrain")
    assert stage1[2] == f"recipes/{demo.LOCKED}.yaml" and not any(c.startswith("model.pretrained=") for c in stage1)
    assert stage2[-2:] == ["schedule.epochs=1", f"model.pretrained={first}"]
    locked = yaml.safe_load((ROOT / "recipes" / f"{demo.LOCKED}.yaml").read_text())
    plain_recipe = yaml.safe_load((ROOT / "recipes" / "demo_pretrain.yaml").read_text())
    assert locked["model"]["freeze_text"] is True and "freeze_text" not in plain_recipe["model"]
    assert locked["schedule"]["epochs"] == 3 and locked["eval"]["benchmarks"] == []  # 960 steps, scored after stage 2
    for recipe in (locked, plain_recipe):
        recipe["schedule"].pop("epochs"), recipe["eval"].pop("benchmarks")
    assert {k: v for k, v in locked.items() if k not in ("name", "model")} == \
        {k: v for k, v in plain_recipe.items() if k not in ("name", "model")}
    assert demo.build_parser().parse_args([]).base == "layout"
    plain = demo.Seed(tmp_path / "plain", 0, _args(base="plain"))
    plain.run = lambda name, cmd, threads=2, step="": ran.append((name, cmd))
    plain.build_world()
    assert not plain.build_layout_world()
    for flag in ("--object-pool", "--fixed-order", "--mirrored-order", "--leftright-fraction"):
        assert flag not in ran[-1][1]
    assert plain.shards("demo_leftright") == [plain.world / "train", plain.world / "train_mirrored"]
    assert plain.train_cmd("demo_pretrain")[-1] != "schedule.epochs=1"


def test_summary_uses_the_last_epoch_and_differences_to_the_control(demo, report, tmp_path):
    seeds = [demo.Seed(tmp_path, s, _args()) for s in (0, 1)]
    for seed, (control, img) in zip(seeds, [(0.50, 0.60), (0.54, 0.58)]):
        for recipe in demo.FINETUNES + ("demo_pretrain",):
            last = img if recipe == "demo_trohn_img" else control
            _write_evals(seed, recipe, [0.1, last])  # the first epoch must not count
    summary = report.summarise(seeds, demo.FINETUNES)
    row = summary["recipes"]["demo_trohn_img"]["sugarcrepe/swap"]
    assert row["values"] == [0.60, 0.58]
    assert row["mean"] == pytest.approx(0.59)
    assert row["delta_mean"] == pytest.approx((0.10 + 0.04) / 2)
    assert row["delta_std"] == pytest.approx(0.0424264, abs=1e-6)
    assert summary["recipes"]["demo_clip_ft"]["sugarcrepe/swap"]["delta_mean"] == pytest.approx(0.0)
    text = report.markdown(summary, "bash launch/demo.sh --seeds 0 1", 1.0)
    assert "| TROHN-Img-style | " in text and "+7.0 ± 4.2" in text and "59.0 ± 1.4" in text
    assert "–" in text  # metrics no run reported are shown as missing, not as 0


def test_a_subset_of_finetunes_runs_and_is_summarised_alone(demo, report, tmp_path):
    seed = demo.Seed(tmp_path, 0, _args(recipes=["demo_clip_ft", "demo_trohn_text"]))
    assert [r for r, _ in seed.finetunes()] == ["demo_trohn_text", "demo_clip_ft"]  # costliest first
    for recipe in ("demo_pretrain", "demo_clip_ft", "demo_trohn_text"):
        _write_evals(seed, recipe, [0.5, 0.6 if recipe == "demo_trohn_text" else 0.55])
    summary = report.summarise([seed], ("demo_clip_ft", "demo_trohn_text"))
    assert list(summary["recipes"]) == ["demo_pretrain", "demo_clip_ft", "demo_trohn_text"]
    text = report.markdown(summary, "bash launch/demo.sh --recipes demo_trohn_text", 1.0)
    assert "| TROHN-Text-style | " in text and "+5.0" in text and "NegCLIP" not in text


def test_the_default_demo_runs_the_left_right_finetune_on_both_shard_sets(demo, tmp_path):
    from compclip.trainer.recipe import load_recipe
    seed = demo.Seed(tmp_path, 1, _args(recipes=list(demo.FINETUNES)))
    assert "demo_leftright" in demo.FINETUNES
    assert "demo_leftright" in [r for r, _ in seed.finetunes()]
    cmd = seed.train_cmd("demo_leftright")
    world = tmp_path / "seed-1" / "world"
    assert f"data.train_shards=[{world / 'train'},{world / 'train_mirrored'}]" in cmd
    recipe = load_recipe(str(ROOT / "recipes" / "demo_leftright.yaml"), [])
    control = load_recipe(str(ROOT / "recipes" / "demo_clip_ft.yaml"), [])
    d = recipe.data
    assert d.partner == "mirrored" and len(d.source_batch) == 2 and sum(d.source_batch) == d.batch_size
    assert d.source_batch[1] > 0 and recipe.negatives.per_image == 0
    # the same base, budget and optimiser as the control; scored on the left/right items
    assert (d.samples_per_epoch, d.batch_size) == (control.data.samples_per_epoch, control.data.batch_size)
    assert recipe.optim == control.optim and recipe.schedule == control.schedule
    for r in demo.FINETUNES:
        rec = load_recipe(str(ROOT / "recipes" / f"{r}.yaml"), [])
        assert "left_right" in rec.eval.benchmarks and rec.data.val_fraction > 0


def test_progress_lines_come_from_the_newest_bar_in_a_step_log(demo, tmp_path):
    log = tmp_path / "step.log"
    log.write_text("$ python trainer/train.py\nwarning: something\n"
                   "epoch 1/4:  10%|#         | 32/320 [00:10<01:30,  3.20step/s, loss=4.1]\r"
                   "epoch 1/4:  20%|##        | 64/320 [00:20<01:20,  3.20step/s, loss=3.9]\r")
    line = demo.last_progress(log)
    assert "64/320" in line and "01:20" in line
    assert demo.last_progress(tmp_path / "missing.log") == ""
    (tmp_path / "quiet.log").write_text("$ python -m datagen knn\n")
    assert demo.last_progress(tmp_path / "quiet.log") == ""


def _write_run(seed, recipe: str, epochs: list[dict]) -> None:
    run = seed.runs / recipe
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "eval.jsonl", "w") as handle:
        for epoch, metrics in enumerate(epochs, 1):
            handle.write(json.dumps({"step": 10 * epoch, "epoch": epoch, "metrics": metrics}) + "\n")


def test_in_batch_numbers_from_the_start_file_eval_log_and_tensorboard(demo, report, tmp_path):
    from torch.utils.tensorboard import SummaryWriter
    seed = demo.Seed(tmp_path, 0, _args())
    (seed.dir / "start").mkdir(parents=True)
    (seed.dir / "start" / "demo_trohn_text.json").write_text(json.dumps({"val/hard_negative_acc": 0.55}))
    _write_run(seed, "demo_trohn_text", [{"val/hard_negative_acc": 0.6}, {"val/hard_negative_acc": 0.7}])
    writer = SummaryWriter(str(seed.runs / "demo_trohn_text" / "tensorboard"))
    for step, value in ((5, 0.5), (10, 0.6), (15, 0.8), (20, 0.9)):
        writer.add_scalar("train/hard_negative_acc", value, step)
    writer.close()
    row = report.inbatch_numbers(seed, "demo_trohn_text")["hard_negative_acc"]
    assert row["val_start"] == 0.55 and row["val_end"] == 0.7
    assert row["train_first"] == pytest.approx(0.5)
    assert row["train_last"] == pytest.approx(0.85)  # steps after the previous epoch's eval (step 10)
    assert "partner_acc" not in report.inbatch_numbers(seed, "demo_trohn_text")


def test_plots_integer_epochs_base_at_epoch_zero_chance_and_no_empty_error_bars(demo, report, tmp_path):
    seeds = [demo.Seed(tmp_path, 0, _args())]
    _write_run(seeds[0], "demo_pretrain", [{"bivlc/t2i": 0.3}])
    for recipe in ("demo_clip_ft", "demo_trohn_img"):
        _write_run(seeds[0], recipe, [{"bivlc/t2i": 0.4} | ({"val/partner_acc": 0.7} if recipe == "demo_trohn_img" else {})])
    summary = report.summarise(seeds, ("demo_clip_ft", "demo_trohn_img"))
    comparison, curves = report.plots(summary, seeds, tmp_path, close=False)
    bars = comparison.axes[0]
    assert not any(c.errorbar for c in bars.containers if hasattr(c, "errorbar") and c.errorbar)
    assert len(bars.collections) == len(report.METRICS)  # a dashed chance mark per metric
    t2i = curves.axes[2]
    assert [float(t) for t in t2i.get_xticks()] == [0.0, 1.0]
    first = t2i.get_lines()[0]
    assert list(first.get_xdata()) == [0, 1] and list(first.get_ydata()) == pytest.approx([30.0, 40.0])
    assert any(list(line.get_ydata()) == [25.0, 25.0] for line in t2i.get_lines())  # chance, BiVLC T2I
    partner = curves.axes[6].get_lines()[0]  # only TROHN-Img-style has partners: same colour as elsewhere
    assert partner.get_label() == "TROHN-Img-style" and partner.get_color() == t2i.get_lines()[1].get_color()


def test_several_seeds_show_each_seeds_difference_to_the_control(demo, report, tmp_path):
    seeds = [demo.Seed(tmp_path, s, _args()) for s in (0, 1, 2)]
    for seed, (control, lr) in zip(seeds, [(0.50, 0.60), (0.52, 0.50), (0.48, 0.58)]):
        for recipe in ("demo_pretrain", "demo_clip_ft", "demo_leftright"):
            _write_run(seed, recipe, [{"left_right/acc": lr if recipe == "demo_leftright" else control}])
    text = report.markdown(report.summarise(seeds, ("demo_clip_ft", "demo_leftright")), "x", 1.0)
    assert "Per-seed difference" in text and "+10.0 / -2.0 / +10.0" in text


def test_start_metrics_needs_a_recipe_after_the_separator(demo, tmp_path, capsys):
    assert demo.main(["start-metrics", str(tmp_path)]) == 2
    assert demo.main(["start-metrics", str(tmp_path), "--"]) == 2
    assert "usage: launch/demo.py start-metrics DIR -- RECIPE" in capsys.readouterr().err
    recipe = ROOT / "recipes" / "demo_clip_ft.yaml"
    assert demo.main(["start-metrics", str(tmp_path), "--", str(recipe), "data.val_fraction=0"]) == 2
    assert "no validation batches" in capsys.readouterr().err


def test_probes_name_a_world_without_shards(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("demo_probes", ROOT / "launch" / "demo_probes.py")
    probes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probes)
    (tmp_path / "train").mkdir()
    with pytest.raises(SystemExit, match="holds no .tar shards"):
        probes.main(["negatives", str(tmp_path), "missing.pt"])


def test_pair_probe_is_50_percent_for_a_relation_blind_text_tower_and_100_for_an_oracle():
    """`pair_probe`: a text tower that maps a caption and its mirrored caption to one point makes
    both prefer the same image, exactly one of the two right (50 %); one that knows each
    caption's own image scores 100 %."""
    import io
    import numpy as np
    import torch
    from PIL import Image
    from compclip.datagen.world.shards import make_sample
    from compclip.datagen.world.splits import Split
    spec = importlib.util.spec_from_file_location("demo_probes", ROOT / "launch" / "demo_probes.py")
    probes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probes)
    split = Split.make(0)
    samples = []
    for i in range(6):
        s = make_sample(i, 0, split, partner="mirrored")
        samples.append({"jpg": s.image, "txt": s.caption.encode(), "partner.jpg": s.partner.image,
                        "partner.txt": s.partner.caption.encode()})
    project = torch.randn(3 * 64 * 64, 8, generator=torch.Generator().manual_seed(0))

    def to_tensor(image):
        return torch.from_numpy(np.asarray(image, dtype=np.float32)).permute(2, 0, 1) / 255
    image_of = {}
    for s in samples:  # each caption's own image, for the oracle
        for img, cap in ((s["jpg"], s["txt"]), (s["partner.jpg"], s["partner.txt"])):
            image_of[cap.decode()] = to_tensor(Image.open(io.BytesIO(img)).convert("RGB"))

    class Model:
        def __init__(self, oracle: bool):
            self.oracle = oracle

        def encode_image(self, x):
            return x.flatten(1) @ project

        def encode_text(self, texts):
            if self.oracle:
                return self.encode_image(torch.stack([image_of[t] for t in texts]))
            return torch.ones(len(texts), 8)  # every caption the same point

    blind = probes.pair_probe(Model(False), to_tensor, list, samples)
    assert blind["partner_acc"] == 50.0 and abs(blind["cos_caption_mirrored"] - 1) < 1e-6
    oracle = probes.pair_probe(Model(True), to_tensor, list, samples)
    assert oracle["partner_acc"] == 100.0 and oracle["pairs"] == 6


def _probes():
    spec = importlib.util.spec_from_file_location("demo_probes", ROOT / "launch" / "demo_probes.py")
    probes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probes)
    return probes


def _mirrored_samples(first: int, n: int) -> list[dict]:
    """Samples `first..first+n-1` of a seed-0 `train_mirrored` set, as `read_samples` returns them."""
    from compclip.datagen.world.shards import make_sample
    from compclip.datagen.world.splits import Split
    split = Split.make(0)
    samples = []
    for i in range(first, first + n):
        s = make_sample(i, 0, split, partner="mirrored")
        samples.append({"jpg": s.image, "txt": s.caption.encode(), "json": json.dumps(s.meta).encode(),
                        "partner.jpg": s.partner.image, "partner.txt": s.partner.caption.encode()})
    return samples


def test_leftright_labels_swap_the_two_objects_between_a_scene_and_its_mirror():
    """`leftright_items`: two items per two-object scene, the mirror's labels the scene's with the
    left and right object swapped (so never equal: a bag of objects cannot tell them apart), and the
    left object the one the scene's layout places further left."""
    from compclip.datagen.world.vocab import SHAPES
    probes = _probes()
    samples = _mirrored_samples(0, 12)
    items = probes.leftright_items(samples)
    two = [s for s in samples if len(json.loads(s["json"])["scene"]["objects"]) == 2]
    assert len(items) == 2 * len(two) > 0
    for scene, mirror, s in zip(items[::2], items[1::2], two):
        assert mirror["labels"] == scene["labels"][2:] + scene["labels"][:2] != scene["labels"]
        assert scene["combo"] == mirror["combo"] and mirror["text"] == s["partner.txt"].decode()
        meta = json.loads(s["json"])
        left = min(range(2), key=lambda k: meta["layout"][k]["cx"])
        assert SHAPES[scene["labels"][0]] == meta["scene"]["objects"][left]["shape"]


def test_drop_combos_leaves_a_share_of_the_held_out_object_pairs_unseen():
    probes = _probes()
    items = probes.leftright_items(_mirrored_samples(0, 20))
    combos = {it["combo"] for it in items}
    kept = probes.drop_combos(items, items, 0.5)
    assert len(combos - {it["combo"] for it in kept}) == round(0.5 * len(combos)) > 0
    assert all(it in items for it in kept) and probes.drop_combos(items, items, 0.0) == items


def test_leftright_scores_are_50_percent_for_a_where_blind_model_and_100_for_an_oracle():
    import torch
    probes = _probes()
    items = probes.leftright_items(_mirrored_samples(0, 12))
    labels = torch.tensor([it["labels"] for it in items])
    classes = [6, 6, 6, 6]
    oracle = [torch.nn.functional.one_hot(labels[:, h], c).float().add(1e-3).log() for h, c in enumerate(classes)]
    assert probes.leftright_scores(oracle, labels)["binding_acc"] == 100.0
    assert probes.leftright_scores(oracle, labels)["attribute_acc"] == 100.0
    blind = [lp.clone() for lp in oracle]
    for lp in blind:
        lp[1::2] = lp[::2]  # the mirror scored as its scene: which objects, not where
    assert probes.leftright_scores(blind, labels)["binding_acc"] == 50.0


def test_leftright_probe_runs_end_to_end_on_a_tiny_world(tmp_path):
    """Every probe of both towers trains and scores on a few generated scenes, the held-out items
    counted; the held-out shard may not be a training shard, and must exist."""
    import io
    import tarfile
    import torch
    from PIL import Image
    from compclip.models.load import load_model
    probes = _probes()
    train, test = probes.leftright_items(_mirrored_samples(0, 16)), probes.leftright_items(_mirrored_samples(100, 6))
    loaded = load_model(arch="demo-vit-64", trim_text=False)

    def load():
        torch.manual_seed(0)
        return load_model(arch="demo-vit-64", trim_text=False).model
    results = probes.leftright_probe(load, loaded.preprocess, loaded.tokenizer, train, test, steps=2,
                                     load_random=load)
    assert set(results) == {"image frozen tokens, linear", "image frozen pooled, linear",
                            "image frozen embedding, linear", "image finetuned", "image from random weights",
                            "text frozen pooled, linear", "text frozen embedding, linear", "text finetuned"}
    for r in results.values():
        assert r["n"] == len(test) and 0 <= r["binding_acc"] <= 100 and 0 <= r["train_binding_acc"] <= 100
    model = load().eval()  # the frozen features: the towers' own outputs, and what lies before them
    images = torch.stack([loaded.preprocess(Image.open(io.BytesIO(it["image"])).convert("RGB")) for it in test])
    texts = loaded.tokenizer([it["text"] for it in test])
    with torch.no_grad():
        image, text = probes.tower_features(model, "image", images), probes.tower_features(model, "text", texts)
        assert torch.allclose(torch.from_numpy(image["embedding"]), model.encode_image(images), atol=1e-5)
        assert torch.allclose(torch.from_numpy(text["embedding"]), model.encode_text(texts), atol=1e-5)
    assert image["tokens"].shape == (len(test), 64 * 128) and text["pooled"].shape == (len(test), 128)
    with pytest.raises(SystemExit, match="is one of --train-shards"):
        probes.main(["leftright", str(tmp_path), "missing.pt", "--test-shard", "0"])
    (tmp_path / "train_mirrored").mkdir()
    tarfile.open(tmp_path / "train_mirrored" / "shard-000000.tar", "w").close()
    with pytest.raises(SystemExit, match="holds 1 shards, no shard number 1"):
        probes.main(["leftright", str(tmp_path), "missing.pt", "--train-shards", "0", "--test-shard", "1"])



def test_save_image_tower_writes_a_base_with_only_the_finetuned_image_tower_changed(tmp_path):
    """`--towers image` probes the image tower alone; `save_image_tower` writes the finetuned model
    as a checkpoint `load_model` reads back: its image tower the finetuned one, every other weight
    the base's, the sidecar the base's with `pretrained` naming the base."""
    import torch
    from compclip.models.checkpoint import CheckpointMeta, read_meta, save_checkpoint
    from compclip.models.load import load_model
    probes = _probes()
    torch.manual_seed(0)
    base = save_checkpoint(tmp_path, "base", load_model(arch="demo-vit-64", trim_text=False).model,
                           CheckpointMeta(arch="demo-vit-64", activation="gelu", lineage="none",
                                          metrics={"left_right/acc": 0.5}), pointers=())
    loaded = load_model(pretrained=str(base), trim_text=False)
    train, test = probes.leftright_items(_mirrored_samples(0, 16)), probes.leftright_items(_mirrored_samples(100, 6))
    finetuned: dict = {}
    results = probes.leftright_probe(lambda: load_model(pretrained=str(base), trim_text=False).model,
                                     loaded.preprocess, loaded.tokenizer, train, test, steps=2,
                                     towers=("image",), finetuned=finetuned)
    assert set(results) == {"image frozen tokens, linear", "image frozen pooled, linear",
                            "image frozen embedding, linear", "image finetuned"} and set(finetuned) == {"image finetuned"}
    probes.save_image_tower(finetuned["image finetuned"], str(base), str(tmp_path / "out" / "layout.pt"))
    saved = load_model(pretrained=str(tmp_path / "out" / "layout.pt"), trim_text=False).model.state_dict()
    before, after = loaded.model.state_dict(), finetuned["image finetuned"].state_dict()
    changed = {k for k in before if not torch.equal(before[k], saved[k])}
    assert changed and all(k.startswith("visual.") for k in changed)
    assert all(torch.equal(saved[k], after[k]) for k in after)
    meta = read_meta(tmp_path / "out" / "layout.pt")
    assert meta.pretrained == str(base) and meta.metrics == {} and meta.arch == "demo-vit-64"
    assert not (tmp_path / "out" / "latest").exists()
    with pytest.raises(SystemExit, match="needs one checkpoint and the image tower"):
        probes.main(["leftright", str(tmp_path), str(base), "--towers", "text", "--save-image-tower", "x.pt"])

def _aux_setup(tmp_path):
    """A random demo-vit-64 base saved as a checkpoint, its loaded copy, left/right items of 16 and
    6 mirrored samples, and the (images, caption tokens, caption ids) of the 16 for the CLIP term."""
    import io
    import torch
    from PIL import Image
    from compclip.models.checkpoint import CheckpointMeta, save_checkpoint
    from compclip.models.load import load_model
    probes = _probes()
    torch.manual_seed(0)
    base = save_checkpoint(tmp_path, "base", load_model(arch="demo-vit-64", trim_text=False).model,
                           CheckpointMeta(arch="demo-vit-64", activation="gelu", lineage="none"), pointers=())
    loaded = load_model(pretrained=str(base), trim_text=False)
    samples = _mirrored_samples(0, 16)
    train, test = probes.leftright_items(samples), probes.leftright_items(_mirrored_samples(100, 6))
    texts = [s["txt"].decode() for s in samples]
    images = torch.stack([loaded.preprocess(Image.open(io.BytesIO(s["jpg"])).convert("RGB")) for s in samples])
    return base, loaded, train, test, (images, loaded.tokenizer(texts), torch.arange(len(texts)))


def test_contrastive_weight_trains_both_towers_with_the_clip_loss_and_the_base_loads(tmp_path):
    """With `contrastive_weight` > 0 the image-tower finetune also takes the CLIP loss of caption
    batches (`contrastive_term`), so the text tower changes too (with 0 it keeps the base's weights),
    the logit scale stays the base's, and `save_image_tower` writes a checkpoint that loads."""
    import torch
    from compclip.models.load import load_model
    probes = _probes()
    base, loaded, train, test, contrastive = _aux_setup(tmp_path)
    images, tokens = contrastive[:2]
    model = load_model(pretrained=str(base), trim_text=False).model
    term = probes.contrastive_term(model, *contrastive, batch=8)
    assert torch.isfinite(term()) and term().requires_grad and float(term()) > 0
    one_text = probes.contrastive_term(model, images, tokens, torch.zeros(len(tokens), dtype=torch.long), batch=8)
    assert float(one_text()) == 0  # every other column has the row's text: masked, as in training
    before = loaded.model.state_dict()
    changed = {}
    for weight in (0.0, 1.0):
        finetuned: dict = {}
        probes.leftright_probe(lambda: load_model(pretrained=str(base), trim_text=False).model, loaded.preprocess,
                               loaded.tokenizer, train, test, steps=2, towers=("image",), finetuned=finetuned,
                               contrastive=contrastive, contrastive_weight=weight)
        after = finetuned["image finetuned"].state_dict()
        changed[weight] = {k for k in before if not torch.equal(before[k], after[k])}
        if weight:
            probes.save_image_tower(finetuned["image finetuned"], str(base), str(tmp_path / "out" / "aux.pt"))
            saved = load_model(pretrained=str(tmp_path / "out" / "aux.pt"), trim_text=False).model.state_dict()
            assert all(torch.equal(saved[k], after[k]) for k in after)
    assert changed[0.0] and all(k.startswith("visual.") for k in changed[0.0])
    text = {k for k in changed[1.0] if not k.startswith("visual.")}
    assert "token_embedding.weight" in text and "text_projection" in text and "logit_scale" not in changed[1.0]



def test_head_weight_zero_trains_on_the_clip_loss_alone(tmp_path):
    """`head_weight` 0 (`--head-weight 0`, the control of the aux base): the labels no longer move
    the towers (two label sets, the same weights after), while the CLIP term still does; the flag
    without `--contrastive-weight` is refused."""
    import torch
    from compclip.models.load import load_model
    probes = _probes()
    base, loaded, train, test, contrastive = _aux_setup(tmp_path)
    flipped = [dict(it, labels=it["labels"][2:] + it["labels"][:2]) for it in train]  # other labels, same inputs
    before = loaded.model.state_dict()

    def weights(items, head_weight):
        finetuned: dict = {}
        probes.leftright_probe(lambda: load_model(pretrained=str(base), trim_text=False).model, loaded.preprocess,
                               loaded.tokenizer, items, test, steps=2, towers=("image",), finetuned=finetuned,
                               contrastive=contrastive, contrastive_weight=1.0, head_weight=head_weight)
        return finetuned["image finetuned"].state_dict()
    a, b = weights(train, 0.0), weights(flipped, 0.0)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], before[k]) for k in a)
    c, d = weights(train, 1.0), weights(flipped, 1.0)
    assert any(not torch.equal(c[k], d[k]) for k in c)  # with the heads on, the labels matter
    with pytest.raises(SystemExit, match="--head-weight needs --contrastive-weight"):
        probes.main(["leftright", str(tmp_path), str(base), "--head-weight", "0"])

def test_start_metrics_overrides_pass_the_recipe_checks(demo):
    """The base model's start numbers load each finetune recipe without benchmarks: its
    `checkpoint.best_metric` (a benchmark metric) must go too, or the pre-flight refuses it."""
    from compclip.trainer.recipe import check_best_metric, load_recipe
    for name in demo.FINETUNES:
        recipe = load_recipe(str(ROOT / "recipes" / f"{name}.yaml"), list(demo.START_OVERRIDES))
        assert not recipe.eval.benchmarks
        check_best_metric(recipe)


def test_bad_arch_size_or_fraction_stops_before_anything_is_written(demo, tmp_path, capsys):
    for bad in (["--arch", "demo-vit-69"], ["--size", "4"], ["--leftright-fraction", "2", "--base", "layout"],
                ["--bench-scale", "0"]):
        with pytest.raises(SystemExit) as exit_:
            demo.main(bad + ["--out", str(tmp_path / "out")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and bad[0] in err, err
    assert not (tmp_path / "out").exists()


def _write_items(report, seed, recipes, accuracy: dict, n: int = 200) -> dict:
    """Each run's last evaluation as the trainer leaves it: its `eval.jsonl` line and its per-item
    values in `eval_items/` (every table metric right on about `accuracy[recipe]` of n items).
    Returns {recipe: left_right/acc}."""
    import numpy as np
    from compclip.eval import stats
    from compclip.trainer.evaluation import save_items
    out = {}
    for k, recipe in enumerate(recipes):
        correct = np.random.default_rng([seed.seed, k]).random(n) < accuracy.get(recipe, 0.5)
        tables: dict = {}
        for metric, _ in report.METRICS:
            bench, name = metric.split("/", 1)
            tables.setdefault(bench, stats.ItemTable(np.arange(n), {})).metrics[name] = stats.metric(correct, np.arange(n))
        _write_run(seed, recipe, [{m: float(correct.mean()) for m, _ in report.METRICS}])
        save_items(seed.runs / recipe, 10, tables)  # _write_run's step of epoch 1
        out[recipe] = float(correct.mean())
    return out


def test_results_give_one_seeds_intervals_and_paired_tests_over_the_seeds(demo, report, tmp_path):
    recipes = ("demo_pretrain", "demo_clip_ft", "demo_leftright")
    seeds = [demo.Seed(tmp_path, s, _args(recipes=list(recipes[1:]))) for s in (0, 1, 2)]
    accs = [_write_items(report, seed, recipes, {"demo_leftright": 0.75}) for seed in seeds]
    summary = report.summarise(seeds, recipes[1:])
    row = summary["paired"]["demo_leftright"]["left_right/acc"]
    expected = [a["demo_leftright"] - a["demo_clip_ft"] for a in accs]
    assert row["per_seed"] == pytest.approx(expected) and row["diff"] == pytest.approx(sum(expected) / 3)
    assert row["test"] == "mcnemar" and row["p_holm"] < 1e-6 and row["ci"][0] > 0.1
    assert list(summary["paired"]) == ["demo_leftright"] and summary["intervals_seed"] == 0
    lr = summary["intervals"]["demo_leftright"]["left_right/acc"]
    assert lr["value"] == pytest.approx(accs[0]["demo_leftright"]) and lr["ci"][0] < lr["value"] < lr["ci"][1]
    text = report.markdown(summary, "x", 1.0)
    assert "Seed 0, each accuracy with its 95 % bootstrap interval" in text
    assert f"{100 * lr['value']:.1f} [{100 * lr['ci'][0]:.1f}, {100 * lr['ci'][1]:.1f}]" in text
    assert f"**{100 * row['diff']:+.1f} [" in text
    # a run without per-item values (trained before the trainer kept them): no such tables
    for path in (seeds[2].runs / "demo_clip_ft" / "eval_items").iterdir():
        path.unlink()
    summary = report.summarise(seeds, recipes[1:])
    assert "paired" not in summary and "bootstrap interval" not in report.markdown(summary, "x", 1.0)


def _stub_steps_done(demo, seed):
    """A seed whose worlds, base model, NegCLIP data and start numbers exist (their steps skip)."""
    for world in (seed.world, seed.lock_world, seed.layout_world):
        world.mkdir(parents=True, exist_ok=True)
        (world / "world.json").write_text("{}")
    seed.base.write_bytes(b"")
    (seed.world / "train_negclip").mkdir(parents=True, exist_ok=True)
    (seed.world / "train_negclip" / "manifest.json").write_text(json.dumps({"complete": True}))
    (seed.dir / "start").mkdir(parents=True, exist_ok=True)
    for recipe in seed.args.recipes:
        (seed.dir / "start" / f"{recipe}.json").write_text(json.dumps({"val/i2t_acc": 0.5}))


def test_overall_progress_names_the_finetune_and_gives_elapsed_and_eta(demo, tmp_path, capsys):
    """A stubbed run of two finetunes: each start and each progress round prints the demo's
    overall line (`finetune 2 of 2`, elapsed, ETA for the whole demo) on stderr."""
    import sys
    seed = demo.Seed(tmp_path, 0, _args(recipes=["demo_clip_ft", "demo_trohn_text"], progress_every=0))
    _stub_steps_done(demo, seed)
    bar = "epoch 2/3:  50%|#####     | 5/10 [00:01<00:01,  5.00step/s]"
    seed.train_cmd = lambda recipe: [sys.executable, "-c", f"import sys, time; sys.stderr.write({bar!r} + '\\r'); "
                                     "sys.stderr.flush(); time.sleep(2.5)"]
    demo.Overall([seed], slots=2)
    demo.run_seed(seed, slots=2)
    err = capsys.readouterr().err
    assert "overall: seed 0 (1 of 1), finetune 1 of 2 (demo_trohn_text); elapsed " in err
    assert "overall: seed 0 (1 of 1), finetune 2 of 2 (demo_clip_ft); elapsed " in err
    assert "ETA " in err and "for the whole demo" in err
    assert "demo_trohn_text: epoch 2/3: 50%" in err  # the bar with its own 1-based epoch of the total
    assert "(epoch " not in err
    assert demo.bar_fraction(bar) == pytest.approx(0.5)  # epoch 2 of 3, half way: (1 + 0.5) / 3
    assert demo.bar_fraction("4000/4000 samples (472/s)") == 1.0 and demo.bar_fraction("no count") is None


def test_overall_eta_scales_the_expected_step_times_by_the_speed_so_far(demo, tmp_path):
    now = [100.0]
    seed = demo.Seed(tmp_path, 0, _args(recipes=["demo_clip_ft"]))
    (seed.world).mkdir(parents=True)
    (seed.world / "world.json").write_text("{}")  # done: not counted
    overall = demo.Overall([seed], slots=2, clock=lambda: now[0])
    assert set(overall.units) == {(0, "base model"), (0, "start numbers"), (0, "demo_clip_ft")}
    left = demo.EXPECTED_S["base model"] + demo.EXPECTED_S["start numbers"] + demo.FINETUNE_S["demo_clip_ft"] / 2
    assert overall.eta() == pytest.approx(left)  # nothing done yet: the expected seconds
    overall.progress(0, "base model", 0.5)
    now[0] += demo.EXPECTED_S["base model"]  # half the base model took its whole expected time: speed 2
    assert overall.eta() == pytest.approx(2 * (left - demo.EXPECTED_S["base model"] / 2))
    assert f"elapsed {demo.EXPECTED_S['base model'] / 60:.1f} min" in overall.line(seed, "base model")


def test_overall_counts_the_layout_base_as_one_step_of_two_runs(demo, tmp_path):
    """`--base layout`: the base model is expected to take `LAYOUT_BASE_S`, and the bars of its two
    runs fill that one step in turn (the first three quarters, then the last)."""
    now = [100.0]
    seed = demo.Seed(tmp_path, 0, _args(recipes=["demo_clip_ft"], base="layout"))
    overall = demo.Overall([seed], slots=2, clock=lambda: now[0])
    assert overall.units[(0, "base model")] == [demo.LAYOUT_BASE_S, 0.0, 0.0]
    third = "epoch 2/3:  0%|          | 0/320 [00:00<?, ?step/s]"  # a third of a 3-epoch run
    seed.show_progress("base model", third, demo.LOCKED)
    assert overall.units[(0, "base model")][1] == pytest.approx(1 / 4)
    seed.show_progress("base model", "epoch 1/1:  50%|#####     | 160/320 [00:30<00:30, 5step/s]", "demo_pretrain")
    assert overall.units[(0, "base model")][1] == pytest.approx(3 / 4 + 1 / 8)
    plain = demo.Seed(tmp_path / "plain", 0, _args(recipes=["demo_clip_ft"]))
    assert demo.Overall([plain], slots=2).units[(0, "base model")][0] == demo.EXPECTED_S["base model"]


def test_overall_eta_counts_a_resumed_step_from_where_this_run_began_it(demo, tmp_path):
    """A layout base whose locked stage an earlier run finished: its bar starts at three quarters of
    the step, which this run did not do; the ETA's speed counts only what came after."""
    now = [100.0]
    seed = demo.Seed(tmp_path, 0, _args(recipes=["demo_clip_ft"], base="layout"))
    (seed.runs / demo.LOCKED / "checkpoints" / "epoch_3").mkdir(parents=True)
    overall = demo.Overall([seed], slots=2, clock=lambda: now[0])
    assert overall.units[(0, "base model")][2] is None
    left = sum(e for e, _, _ in overall.units.values())
    now[0] += 30.0
    seed.show_progress("base model", "epoch 1/1:  10%|#         | 32/320 [00:09<01:20, 3step/s]", "demo_pretrain")
    first = overall.units[(0, "base model")][1]
    assert first == pytest.approx(3 / 4 + 1 / 40) and overall.eta() == pytest.approx(left - demo.LAYOUT_BASE_S * first)
    now[0] += 30.0  # the next tenth of the free stage in 30 s: speed 30 s per LAYOUT_BASE_S / 40
    seed.show_progress("base model", "epoch 1/1:  20%|##        | 64/320 [00:19<01:10, 3step/s]", "demo_pretrain")
    done = demo.LAYOUT_BASE_S / 40
    assert overall.eta() == pytest.approx((left - demo.LAYOUT_BASE_S * (first + 1 / 40)) * 60.0 / done)
    fresh = demo.Seed(tmp_path / "fresh", 0, _args(recipes=["demo_clip_ft"], base="layout"))
    assert demo.Overall([fresh], slots=2).units[(0, "base model")][2] == 0.0


def test_a_rerun_keeps_the_recorded_wall_time_of_the_steps_it_skips(demo, tmp_path):
    seed = demo.Seed(tmp_path, 0, _args(recipes=["demo_clip_ft"], progress_every=30))
    _stub_steps_done(demo, seed)
    seed.record_time("world", 30.0)
    seed.record_time("base model", 150.0)
    seed.record_time("finetunes", 420.0)
    (seed.runs / "demo_clip_ft").mkdir(parents=True)
    (seed.runs / "demo_clip_ft" / "DONE").write_text("")
    before = seed.wall_times()
    demo.run_seed(seed, slots=2)  # every step done: nothing runs
    assert seed.wall_times() == before
    assert demo.total_minutes([seed]) == pytest.approx(10.0)
    ran = []
    assert seed.timed("start numbers", lambda: ran.append(1) or True) and ran
    assert "start numbers" in seed.wall_times() and seed.wall_times()["world"] == 30.0


def test_tensorboard_holds_the_epoch_zero_points_the_curves_plot(demo, report, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    seeds = [demo.Seed(tmp_path, 0, _args(recipes=["demo_clip_ft", "demo_trohn_img"]))]
    _write_run(seeds[0], "demo_pretrain", [{"bivlc/t2i": 0.2}, {"bivlc/t2i": 0.3, "val/i2t_acc": 0.9}])
    (seeds[0].dir / "start").mkdir(parents=True)
    (seeds[0].dir / "start" / "demo_trohn_img.json").write_text(json.dumps({"val/partner_acc": 0.6}))
    assert demo.write_start_scalars(seeds[0], "demo_trohn_img")
    assert not demo.write_start_scalars(seeds[0], "demo_trohn_img")  # once: a rerun adds no second point
    _write_run(seeds[0], "demo_trohn_img", [{"bivlc/t2i": 0.4, "val/partner_acc": 0.7}])
    _write_run(seeds[0], "demo_clip_ft", [{"bivlc/t2i": 0.4}])
    events = EventAccumulator(str(seeds[0].runs / "demo_trohn_img" / "tensorboard"))
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("eval/bivlc/t2i")] == [(0, 0.3)]
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("val/partner_acc")] == [(0, 0.6)]
    assert "eval/val/i2t_acc" not in events.Tags()["scalars"]  # the base run's own validation is not the finetune's
    summary = report.summarise(seeds, ("demo_clip_ft", "demo_trohn_img"))
    _, curves = report.plots(summary, seeds, tmp_path, close=False)
    t2i = curves.axes[2].get_lines()[1]  # TROHN-Img-style
    partner = curves.axes[6].get_lines()[0]
    assert t2i.get_ydata()[0] == pytest.approx(100 * events.Scalars("eval/bivlc/t2i")[0].value)
    assert partner.get_ydata()[0] == pytest.approx(100 * events.Scalars("val/partner_acc")[0].value)


def test_curves_are_two_rows_at_a_normal_size_with_chance_on_every_panel(demo, report, tmp_path):
    from PIL import Image
    from compclip.trainer.recipe import load_recipe
    seeds = [demo.Seed(tmp_path, 0, _args())]
    _write_run(seeds[0], "demo_pretrain", [{"bivlc/t2i": 0.3}])
    _write_run(seeds[0], "demo_clip_ft", [{"bivlc/t2i": 0.4}])
    _, curves = report.plots(report.summarise(seeds, ("demo_clip_ft",)), seeds, tmp_path, close=False)
    width, height = Image.open(tmp_path / "curves.png").size
    assert (width, height) == (1560, 792)  # was 2688 x 456: one row of seven panels
    panels = curves.axes[:len(report.CURVES)]
    assert len({round(ax.get_position().y0, 3) for ax in panels}) == 2  # two rows
    for ax, (metric, _) in zip(panels, report.CURVES):
        chance = 100 * {**report.CHANCE, **report.CHANCE_VAL}[metric]
        assert any(line.get_linestyle() == "--" and list(line.get_ydata()) == [chance, chance]
                   for line in ax.get_lines()), metric
    for name in demo.FINETUNES:  # hard-negative chance 1/2: at most one negative per image or partner
        n = load_recipe(str(ROOT / "recipes" / f"{name}.yaml"), []).negatives
        assert n.per_image <= 1 and n.per_partner <= 1


def test_a_rerun_with_every_step_done_writes_the_recorded_time_into_results(demo, tmp_path):
    """The whole `main` on a finished demo folder: nothing runs, and results.md states the
    recorded wall time of the steps (10.0 min), not this rerun's 0.0 min."""
    args = _args(recipes=["demo_clip_ft"], base="layout")  # the parser's default
    seed = demo.Seed(tmp_path / "out", 0, args)
    _stub_steps_done(demo, seed)
    for recipe in ("demo_pretrain", "demo_clip_ft"):
        _write_run(seed, recipe, [{"bivlc/t2i": 0.3}])
        (seed.runs / recipe / "DONE").write_text("")
    seed.record_time("base model", 240.0)
    seed.record_time("finetunes", 360.0)
    assert demo.main(["--out", str(tmp_path / "out"), "--recipes", "demo_clip_ft"]) == 0
    text = (tmp_path / "out" / "results.md").read_text()
    assert "; 10.0 min wall" in text and " 0.0 min" not in text


def test_probes_command_names_a_missing_checkpoint_or_a_bad_shard_in_one_line(tmp_path):
    import subprocess
    import sys
    import tarfile
    shards = tmp_path / "world" / "train_mirrored"
    shards.mkdir(parents=True)
    with tarfile.open(shards / "shard-000000.tar", "w") as tar:
        tar.addfile(tarfile.TarInfo("k0.txt"))

    def probe(checkpoint):
        done = subprocess.run([sys.executable, "launch/demo_probes.py", "pairs", str(tmp_path / "world"),
                               str(checkpoint)], cwd=ROOT, capture_output=True, text=True)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        return lines[0]
    assert "missing.pt" in probe(tmp_path / "missing.pt")
    (shards / "shard-000000.tar").write_bytes(b"")
    assert "shard-000000.tar: not a readable tar shard" in probe(tmp_path / "missing.pt")
