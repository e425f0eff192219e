"""`python -m eval compare` (eval.compare): paired differences, McNemar's exact test, the paired
bootstrap test, Holm's correction, checkpoints read from the score cache without loading them (nor importing torch),
and report folders."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from compclip.errors import InputError
from compclip.eval import compare, stats
from compclip.eval.cli import main
from compclip.models import CheckpointMeta, load_model, save_checkpoint
from tests.fixtures.eval_data import make_data_root


def table(values, clusters=None, **extra):
    n = len(values)
    metrics = {"acc": stats.metric(values, np.arange(n)), **extra}
    return stats.ItemTable(np.arange(n) if clusters is None else np.asarray(clusters), metrics)


def test_mcnemar_is_the_exact_binomial_test_on_discordant_items():
    rng = np.random.default_rng(0)
    a = rng.random(300) < 0.6
    b = a.copy()
    b[rng.choice(300, 40, replace=False)] ^= True
    p, (only_a, only_b) = compare.mcnemar(stats.metric(a, np.arange(300)), stats.metric(b, np.arange(300)))
    assert only_a == int((a & ~b).sum()) and only_b == int((~a & b).sum()) and only_a + only_b == 40
    assert p == binomtest(only_b, 40, 0.5).pvalue
    assert compare.mcnemar(stats.metric(a, np.arange(300)), stats.metric(a, np.arange(300)))[0] == 1.0


def test_holm_step_down():
    assert compare.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert compare.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert compare.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_a_real_gain_is_found_and_noise_is_not():
    rng = np.random.default_rng(1)
    base = rng.random(640) < 0.6
    better = base | (rng.random(640) < 0.3)  # about 12 points more, never worse on an item
    noise = base.copy()
    noise[rng.choice(640, 20, replace=False)] ^= True
    rows = compare.compare({"a": {"x": table(base)}, "b": {"x": table(better)}, "c": {"x": table(noise)}},
                           ["x/acc"])
    gain, same = rows
    assert gain.model == "b" and gain.test == "mcnemar" and gain.p < 1e-6 and gain.ci_low > 0.05
    assert gain.diff == pytest.approx(better.mean() - base.mean())
    assert same.p > 0.05 and same.ci_low < 0 < same.ci_high


def test_macro_metrics_get_the_paired_bootstrap_test():
    rng = np.random.default_rng(2)
    a = (rng.random(400) < 0.5).astype(float)
    b = np.where(np.arange(400) < 200, 1.0, a)  # much better on the first part
    macro = lambda v: stats.metric(v, np.arange(200), np.arange(200, 400))  # noqa: E731
    rows = compare.compare({"a": {"x": table(a, macro=macro(a))}, "b": {"x": table(b, macro=macro(b))}},
                           ["x/macro"])
    assert rows[0].test == "bootstrap" and rows[0].p < 0.01 and rows[0].discordant is None
    assert compare.bootstrap_p(np.zeros(10), 0.0) == 1.0


def test_holm_runs_over_the_metrics_compared():
    rng = np.random.default_rng(3)
    a = rng.random(300) < 0.5
    b = a.copy()
    b[:30] = True
    models = {m: {"x": table(v), "y": table(v)} for m, v in (("a", a), ("b", b))}
    rows = compare.compare(models, ["x/acc", "y/acc"])
    assert [r.p_holm for r in rows] == pytest.approx([min(1, 2 * rows[0].p)] * 2)


def test_models_scored_on_other_items_are_refused():
    with pytest.raises(InputError, match="not scored on the same items"):
        compare.compare({"a": {"x": table([1, 0, 1])}, "b": {"x": table([1, 0, 1, 1])}}, ["x/acc"])
    with pytest.raises(InputError, match="no per-item values for this metric; known: x/acc"):
        compare.compare({"a": {"x": table([1, 0])}, "b": {"x": table([1, 1])}}, ["x/macro"])


def test_pooled_over_item_sets_sums_discordant_items_and_averages_differences():
    rng = np.random.default_rng(4)
    sets, per_set_diffs = [], []
    for k in range(3):  # three seeds: each its own items, the model a little better on each
        a = rng.random(200) < 0.6
        b = a | (rng.random(200) < 0.06)
        b[rng.choice(200, 5, replace=False)] = False
        sets.append({"ctl": {"x": table(a)}, "ft": {"x": table(b)}})
        per_set_diffs.append(b.mean() - a.mean())
    (row,) = compare.compare_pooled(sets, ["x/acc"])
    singles = [compare.compare(s, ["x/acc"])[0] for s in sets]
    assert row.per_set == pytest.approx(per_set_diffs) and row.diff == pytest.approx(np.mean(per_set_diffs))
    assert row.discordant == tuple(int(sum(r.discordant[i] for r in singles)) for i in (0, 1))
    assert row.p == binomtest(row.discordant[1], sum(row.discordant), 0.5).pvalue
    assert row.p < min(r.p for r in singles)  # three sets say more than any one
    # each set resampled on its own: the pooled interval is about 1/sqrt(3) of one set's
    ratio = (row.ci_high - row.ci_low) / np.mean([r.ci_high - r.ci_low for r in singles])
    assert 0.45 < ratio < 0.75
    # one set: exactly `compare`
    assert compare.compare_pooled(sets[:1], ["x/acc"]) == [singles[0]] and singles[0].per_set is None


def test_pooled_sets_must_hold_the_same_models_and_items():
    one = {"ctl": {"x": table([1, 0, 1])}, "ft": {"x": table([1, 1, 1])}}
    with pytest.raises(InputError, match="seed-1: holds models"):
        compare.compare_pooled([one, {"ctl": one["ctl"], "other": one["ft"]}], ["x/acc"], names=["seed-0", "seed-1"])
    with pytest.raises(InputError, match="seed-1: x: ctl and ft were not scored on the same items"):
        compare.compare_pooled([one, {"ctl": {"x": table([1, 0])}, "ft": one["ft"]}], ["x/acc"],
                               names=["seed-0", "seed-1"])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    root = make_data_root(tmp / "data", n=8, seed=2)
    for s in (0, 1):
        torch.manual_seed(s)
        model = load_model("micro-vit-32").model
        save_checkpoint(tmp / f"run{s}" / "checkpoints", "step_1", model,
                        CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none"))
    return tmp, root


def test_compare_two_runs_then_again_from_the_score_cache(setup, monkeypatch, capsys):
    tmp, root = setup
    args = ["compare", str(tmp / "run0"), str(tmp / "run1" / "checkpoints" / "step_1.pt"), "--benchmarks",
            "visla,sugarcrepe", "--data-root", str(root), "--cache-dir", str(tmp / "scores"), "--quiet",
            "--label", "zero", "--label", "one", "--out", str(tmp / "cmp")]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "| one | sugarcrepe/macro |" in first and "| one | visla/generic/i2t |" in first
    rows = json.loads((tmp / "cmp" / "compare.json").read_text())["rows"]
    assert [r["metric"] for r in rows] == ["visla/generic/i2t", "sugarcrepe/macro"]
    assert (tmp / "cmp" / "compare.png").read_bytes()[:4] == b"\x89PNG"

    def no_load(*a, **k):
        raise AssertionError("a cached checkpoint was loaded")
    monkeypatch.setattr("compclip.models.load_model", no_load)
    assert main(args) == 0
    assert capsys.readouterr().out == first


def test_a_comparison_read_from_the_score_cache_imports_no_torch(setup, repo_root, tmp_path, capsys):
    tmp, root = setup
    args = ["compare", str(tmp / "run0"), str(tmp / "run1"), "--benchmarks", "visla,sugarcrepe,aro", "--data-root",
            str(root), "--options", '{"aro": {"parts": ["vg_relation", "coco_order"]}}', "--cache-dir",
            str(tmp_path / "scores"), "--quiet", "--no-plots"]
    assert main(args) == 0  # scores both checkpoints into the cache
    first = capsys.readouterr().out
    code = ("import json, sys; from compclip.eval.cli import main; rc = main(json.loads(sys.argv[1])); "
            "print(rc, sorted(m for m in ('torch', 'open_clip', 'spacy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(repo_root)), cwd=repo_root)
    assert done.returncode == 0, done.stderr
    assert done.stdout == first + "0 []\n"


def test_compare_report_folders(setup, capsys):
    tmp, root = setup
    for s in (0, 1):
        assert main(["score", "--pretrained", str(tmp / f"run{s}"), "--label", f"m{s}", "--benchmarks",
                     "sugarcrepe,bivlc", "--data-root", str(root), "--out", str(tmp / f"rep{s}"), "--quiet",
                     "--no-plots", "--no-cache"]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp / "rep0"), str(tmp / "rep1"), "--metrics", "bivlc/group,sugarcrepe/swap"]) == 0
    out = capsys.readouterr().out
    assert "| m1 | bivlc/group |" in out and "| m1 | sugarcrepe/swap |" in out and "Holm" in out
    # --pool: each folder one seed's report holding the same models (here one report twice)
    assert main(["score", "--pretrained", str(tmp / "run0"), "--pretrained", str(tmp / "run1"), "--label", "m0",
                 "--label", "m1", "--benchmarks", "sugarcrepe", "--data-root", str(root), "--out", str(tmp / "both"),
                 "--quiet", "--no-plots", "--no-cache"]) == 0
    assert main(["compare", "--pool", str(tmp / "both"), str(tmp / "both"), "--metrics", "sugarcrepe/swap_obj",
                 "--out", str(tmp / "pooled"), "--no-plots"]) == 0
    (row,) = json.loads((tmp / "pooled" / "compare.json").read_text())["rows"]
    single = compare.compare(compare.from_report(tmp / "both"), ["sugarcrepe/swap_obj"])[0]
    assert row["per_set"] == [single.diff] * 2 and row["diff"] == pytest.approx(single.diff)
    assert row["test"] == "mcnemar" and row["discordant"] == [2 * k for k in single.discordant]
    assert main(["compare", "--pool", str(tmp / "rep0"), str(tmp / "rep0"), "--metrics", "sugarcrepe/swap"]) == 2
    assert "compare needs at least two models" in capsys.readouterr().err
    assert main(["compare", "--pool", str(tmp / "rep1"), str(tmp / "run0")]) == 2
    assert "--pool takes report folders" in capsys.readouterr().err
    (tmp / "rep1" / "m1.items.npz").unlink()
    assert main(["compare", str(tmp / "rep0"), str(tmp / "rep1")]) == 2
    assert "m1.items.npz not found" in capsys.readouterr().err


def test_a_checkpoint_needs_benchmarks_and_a_data_root(setup, capsys):
    tmp, _ = setup
    assert main(["compare", str(tmp / "run0"), str(tmp / "run1")]) == 2
    assert "give both" in capsys.readouterr().err
