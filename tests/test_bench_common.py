"""bench/common.py: repetition statistics, number formatting, markdown tables, steady-state rates.
Pure Python (no torch), well under 2 s."""
import json
import sys

import pytest

from bench import common
from bench.common import (fmt_num, fmt_stat, markdown_table, percentile, ratio_stat, steady_rate,
                          summarize)


def test_summarize_odd_and_even_counts():
    s = summarize([5.0, 1.0, 3.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3.0, 1.0, 5.0, 3)
    assert s["runs"] == [5.0, 1.0, 3.0]  # repetition order kept
    s = summarize([4, 1, 3, 2])
    assert s["median"] == 2.5
    assert (s["q1"], s["q3"]) == (1.75, 3.25)  # numpy's linear interpolation


def test_summarize_rounds_and_rejects_empty():
    assert summarize([1 / 3], digits=2)["median"] == 0.33
    with pytest.raises(ValueError):
        summarize([])


def test_percentile_matches_linear_interpolation():
    xs = [10, 20, 30, 40, 50]
    assert percentile(xs, 0) == 10 and percentile(xs, 100) == 50
    assert percentile(xs, 50) == 30
    assert percentile(xs, 10) == pytest.approx(14.0)


def test_ratio_stat_pairs_by_repetition():
    r = ratio_stat([100, 90, 120], [50, 60, 40])
    assert r["runs"] == [2.0, 1.5, 3.0]
    assert r["median"] == 2.0  # median of the paired ratios, not ratio of medians (110/50)
    with pytest.raises(ValueError):
        ratio_stat([1, 2], [1])


def test_fmt_num_and_fmt_stat():
    assert fmt_num(None) == "-"
    assert fmt_num(1234.6) == "1,235"
    assert fmt_num(123.4) == "123"
    assert fmt_num(12.34) == "12.3"
    assert fmt_num(1.234) == "1.23"
    assert fmt_num(0.01234) == "0.0123"
    assert fmt_num(0) == "0"
    assert fmt_stat(summarize([1.0, 2.0, 4.0]), "x") == "2.00x (1.00x–4.00x, n=3)"
    assert fmt_stat(summarize([150.0])) == "150 (n=1)"
    assert fmt_stat(None) == "-"


def test_markdown_table_layout_and_escaping():
    table = markdown_table(["name", "rate"], [["a|b", 1.5], ["c", None]])
    lines = table.splitlines()
    assert lines[0] == "| name | rate |"
    assert lines[1] == "|:---|---:|"
    assert lines[2] == "| a\\|b | 1.5 |"
    assert lines[3] == "| c | - |"
    assert markdown_table(["x", "y"], [], align=["r", "l"]).splitlines()[1] == "|---:|:---|"


def test_markdown_table_rejects_ragged_rows():
    with pytest.raises(ValueError):
        markdown_table(["a", "b"], [[1, 2, 3]])
    with pytest.raises(ValueError):
        markdown_table(["a", "b"], [], align=["l"])


def test_steady_rate_uses_window_after_warmup():
    # (completed steps, wall time): 10 s of start-up, then 0.5 s per step of 32 samples
    points = [(1, 10.5), (4, 12.0), (8, 14.0), (12, 16.0), (16, 18.0)]
    r = steady_rate(points, samples_per_step=32, warmup_steps=8)
    assert (r["from_step"], r["to_step"]) == (8, 16)
    assert r["samples_per_s"] == pytest.approx(64.0)
    with pytest.raises(ValueError):
        steady_rate(points, 32, warmup_steps=16)  # one point left: no window
    with pytest.raises(ValueError):
        steady_rate([(8, 5.0), (9, 5.0)], 32, 0)  # time does not advance


def test_write_and_read_result(tmp_path):
    path = common.write_result("x", {"value": 1, "meta": "replaced"}, tmp_path / "x.json")
    data = json.loads(path.read_text())
    assert data["value"] == 1
    assert set(data["meta"]) >= {"date", "command", "machine", "versions", "git_commit"}
    assert data["meta"]["versions"]["python"]
    assert common.read_result("x", tmp_path)["value"] == 1
    assert common.read_result("missing", tmp_path) is None


# --- COCO-length captions, shard sets, an earlier commit, FLOP formula --------------------------

def _sugarcrepe(tmp_path, rows):
    folder = tmp_path / "sc"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({str(i): r for i, r in enumerate(rows)}))
    return folder


def test_coco_captions_reads_caption_and_negative_and_drops_repeats(tmp_path):
    folder = _sugarcrepe(tmp_path, [{"caption": " A dog on a bed. ", "negative_caption": "A cat on a bed."},
                                    {"caption": "A dog on a bed.", "negative_caption": "A dog under a bed."},
                                    {"caption": "Two men ride bikes.", "negative_caption": "Two men ride horses."}])
    assert common.coco_captions(folder) == [("A dog on a bed.", "A cat on a bed."),
                                            ("Two men ride bikes.", "Two men ride horses.")]


def test_coco_captions_bad_input_exits_2_naming_the_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        common.coco_captions(tmp_path / "nowhere")
    assert err.value.code == 2 and "nowhere" in capsys.readouterr().err
    folder = _sugarcrepe(tmp_path, [{"text": "no caption field"}])
    with pytest.raises(SystemExit) as err:
        common.coco_captions(folder)
    assert err.value.code == 2 and "a.json" in capsys.readouterr().err


def test_real_coco_captions_have_coco_lengths():
    import open_clip
    if not common.COCO_CAPTIONS_DIR.is_dir():
        pytest.skip(f"{common.COCO_CAPTIONS_DIR} not here")
    pairs = common.coco_captions()
    assert len(pairs) > 1000 and len({c for c, _ in pairs}) == len(pairs)
    lengths = common.token_lengths([c for c, _ in pairs[:500]], open_clip.get_tokenizer("ViT-B-32"))
    assert 8 < sum(lengths) / len(lengths) < 25 and max(lengths) <= 77  # short against the 77 context


def test_token_lengths_count_start_and_end():
    import open_clip
    assert common.token_lengths(["a cat", "a cat on a mat"], open_clip.get_tokenizer("ViT-B-32")) == [4, 7]


def test_write_caption_shards_carries_the_captions_negatives_and_neighbours(tmp_path):
    import tarfile
    pairs = [(f"caption number {i}", f"negative number {i}") for i in range(5)]
    out = common.write_caption_shards(tmp_path / "set", pairs, n=7, per_shard=4, negatives=2, neighbours=2)
    members = {}
    for tar in sorted(out.glob("*.tar")):
        with tarfile.open(tar) as tf:
            for m in tf.getmembers():
                members[m.name] = tf.extractfile(m).read()
    captions = [members[f"c{i:06d}.txt"].decode() for i in range(7)]
    assert captions == [pairs[i % 5][0] for i in range(7)]
    negs = json.loads(members["c000006.neg.json"])
    assert [n["text"] for n in (negs["negatives"] if isinstance(negs, dict) else negs)] == \
        ["negative number 1", "negative number 2"]
    assert (out / "keys.tsv").is_file()
    assert json.loads((out / "manifest.json").read_text())["features"]["neighbours"] == 2


def test_export_commit_writes_that_commits_tree(tmp_path):
    import subprocess
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=common.ROOT, capture_output=True, text=True).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    out = common.export_commit(head, tmp_path / "tree")
    assert (out / "bench" / "common.py").is_file() and (out / "trainer" / "train.py").is_file()
    with pytest.raises(SystemExit) as err:
        common.export_commit("0" * 40, tmp_path / "none")
    assert err.value.code == 2


def test_attention_flops_match_counted_attention_matmuls():
    """The analytic term bench_trainer adds for the attention the FLOP counter misses on CPU."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from bench.bench_trainer import attention_flops, expected_batch_max
    length, width, heads = 9, 16, 4
    q = k = v = torch.randn(heads, length, width // heads)
    with FlopCounterMode(display=False) as counter:
        torch.bmm(torch.bmm(q, k.transpose(1, 2)).softmax(-1), v)
    assert counter.get_total_flops() == attention_flops(width, 1, length)
    assert expected_batch_max([5] * 10, 8) == 5
    assert expected_batch_max(list(range(1, 40)), 64) > expected_batch_max(list(range(1, 40)), 4)


# --- run_all's report sections for issue 18 (synthetic numbers: rendering only) -----------------

def _stat(x):
    return summarize([x])


def test_report_today_vs_old_states_the_goal_from_the_paired_ratio():
    from bench.run_all import section_today_vs_old
    for ratio, status in ((1.5, "**met**"), (1.2, "**missed**")):
        r = {"old_commit": "43bb405", "batch_per_process": 32, "steps": 32, "workers_per_process": 1, "reps": 1,
             "today_vs_old": {"negclip": {"label": "NegCLIP-style", "today": _stat(30 * ratio), "old": _stat(30),
                                          "today_over_old": _stat(ratio), "old_over_new_flops": 1.8,
                                          "goal_met": ratio >= 1.4}},
             "hard_negatives": {"negclip": {"cost_over_flop_ratio": 0.9}, "old_code": {}}}
        goals, notes = [], []
        text = section_today_vs_old(r, goals, notes)
        assert "43bb405" in text and "NegCLIP-style" in text
        assert goals[0][-1] == status and bool(notes) == (status == "**missed**")
    goals = []
    assert "Not run" in section_today_vs_old(None, goals, [])
    assert goals[0][2] == "not run"


def test_report_loader_reads_the_negclip_draft_uint8_row():
    from bench.run_all import section_loader
    row = {"label": "NegCLIP-style", "images_per_anchor": 2.0, "jpeg_draft": True, "output": "uint8",
           "cpu_anchors_per_s": _stat(100.0), "loader_anchors_per_s": _stat(80.0)}
    r = {"rows": {"negclip/draft/uint8": row, "negclip/full/float": {**row, "jpeg_draft": False, "output": "float"}},
         "goal_met": False, "jpeg": {"distinct": 4, "size": [640, 480], "quality": 90, "kb": _stat(130.0)},
         "arch_transform": "ViT-B-32", "batch": 32, "batches": 2, "warmup_batches": 1, "reps": 1}
    goals, notes = [], []
    text = section_loader(r, goals, notes)
    assert text.count("| NegCLIP-style |") == 2
    assert goals[0][-1] == "**missed**" and "100" in goals[0][2] and notes


# --- run_all's GPU rows (issue 34) ----------------------------------------------------------------

def _run_all(monkeypatch, tmp_path, cuda: bool) -> tuple[list, dict]:
    """run_all.main with `--only gpu gpu_eval`, the scripts replaced by a recorder."""
    import subprocess

    from bench import run_all
    calls, real = [], subprocess.run

    def fake(cmd, **kw):
        if str(cmd[1]).startswith("bench/"):  # a bench script: recorded, not run
            calls.append(cmd)
            return subprocess.CompletedProcess(cmd, 0)
        return real(cmd, **kw)
    monkeypatch.setattr(run_all, "cuda_visible", lambda: cuda)
    monkeypatch.setattr(subprocess, "run", fake)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--only", "gpu", "gpu_eval", "--results-dir", str(tmp_path),
                                      "--report", str(tmp_path / "R.md")])
    run_all.main()
    return calls, json.loads((tmp_path / "run_all.json").read_text())


def test_run_all_runs_the_gpu_rows_when_cuda_is_visible(monkeypatch, tmp_path):
    calls, run = _run_all(monkeypatch, tmp_path, cuda=True)
    assert [c[1] for c in calls] == ["bench/bench_gpu.py", "bench/bench_eval.py"]
    assert calls[1][2:4] == ["--device", "cuda"] and calls[0][-1] == str(tmp_path / "gpu.json")
    assert [s["returncode"] for s in run["steps"]] == [0, 0]


def test_run_all_records_the_gpu_rows_as_not_run_without_cuda(monkeypatch, tmp_path):
    calls, run = _run_all(monkeypatch, tmp_path, cuda=False)
    assert calls == []
    assert [s["skipped"] for s in run["steps"]] == ["not run: no CUDA device (torch.cuda.is_available() is False)"] * 2
    assert (tmp_path / "R.md").read_text().count("| not run: no CUDA device") == 2


def test_report_gpu_says_when_the_data_probe_under_reads_the_run():
    """The recorded GPU JSON, and copies whose data probe reads above / below the run."""
    import copy
    from pathlib import Path

    from bench.run_all import section_gpu
    r = json.loads((Path(__file__).parents[1] / "bench/results/gpu.json").read_text())
    run = r["ours_negclip"]["samples_per_s"]["median"]
    for probe, warm, expect in ((run / 2, 4, "fewer warm-up batches than workers"), (run / 2, 24, "under-reads"),
                                (run * 2, 24, None)):
        rr = copy.deepcopy(r)
        d = rr["profile"]["data_only"]
        for shape in d.values():
            shape["warm_batches"] = warm
        d["negclip"]["anchors_per_s"] = probe
        d["plain"]["anchors_per_s"] = rr["ours_plain"]["samples_per_s"]["median"] * 2
        goals = []
        text = section_gpu(rr, None, goals, [])
        assert ("The NegCLIP-style run itself" in text) == (expect is not None)
        assert ("not settled which one reads the steady rate" in goals[-1][3]) == (expect is not None)
        assert f"timed after {warm})" in text
        assert ("under-reads" in text) == (expect is not None)
        assert ("the run's window drew on batches its workers had made before it" in text) == (expect is not None)
        assert ("fewer warm-up" in text) == (expect == "fewer warm-up batches than workers")
    rr = copy.deepcopy(r)
    for shape, case in (("plain", "ours_plain"), ("negclip", "ours_negclip")):
        rr["profile"]["data_only"][shape]["anchors_per_s"] = rr[case]["samples_per_s"]["median"] / 2
    assert "The plain and the NegCLIP-style runs themselves were faster" in section_gpu(rr, None, [], [])


def test_report_gpu_goal_row_names_a_card_other_than_the_h100_the_goal_is_stated_for():
    import copy
    from pathlib import Path

    from bench.run_all import section_gpu
    r = json.loads((Path(__file__).parents[1] / "bench/results/gpu.json").read_text())
    for device, flagged in (("NVIDIA H100 80GB HBM3", False), ("NVIDIA H200", True)):
        rr = copy.deepcopy(r)
        rr["device"] = device
        goals = []
        section_gpu(rr, None, goals, [])
        row = next(g for g in goals if g[0].startswith("GPU: NegCLIP-style"))
        assert device in row[0]
        assert ("goal is stated for one H100" in row[3]) == flagged


# --- run_all's scale section (issue 37; synthetic numbers: rendering only) ---------------------------

def test_report_scale_shows_every_row_and_states_the_flags():
    from bench.bench_scale import FLAG_THRESHOLDS, PROJECT_TO, summarize_row
    from bench.run_all import section_scale
    sizes = (25_000, 100_000, 400_000)

    def row(stage, label, times, peaks, **extra):
        runs = [{"n": n, "seconds": t, "peak_rss_mib": p, "command": f"python -m x --n {n}", **extra}
                for n, t, p in zip(sizes, times, peaks)]
        return {"stage": stage, "label": label, "unit": "samples", "measures": "the whole command", "runs": runs,
                **summarize_row(stage, runs)}
    r = {"threads": "1", "image_px": 64, "project_to": PROJECT_TO, "flag_thresholds": FLAG_THRESHOLDS,
         "rows": {"shuffle": row("shuffle", "`datagen shuffle`", [4.0, 16.0, 64.0], [100.0, 100.0, 101.0]),
                  "approx_knn": row("approx_knn", "approximate kNN", [2.0, 10.0, 50.0], [300.0, 600.0, 1200.0],
                                    recall=0.97)}}
    goals, notes = [], []
    text = section_scale(r, goals, notes)
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(lines) == 2
    assert lines[0].startswith("| `shuffle`: `datagen shuffle` | 25k / 100k / 400k samples | 4.00 / 16.0 / 64.0 |")
    assert "| 1.00 | 0.00 | 1.01x | 96.0 s, 101 MiB | 8.00 min, 102 MiB |" in lines[0] and lines[0].endswith("| - |")
    assert "**time exponent 1.16 > 1.1; peak memory x4.00 over x16 the data (> 1.2)**" in lines[1]
    assert "CC12M (12M)" in text and "`approx_knn` recall@3 per size: 0.97 / 0.97 / 0.97" in text
    assert "- `shuffle` (the whole command): `python -m x --n 400000`" in text
    assert goals == [["10. every stage linear in time and flat in memory",
                      "time exponent <= 1.1 (exact_knn excepted), peak ratio <= 1.2",
                      "1 of 2 rows flagged: approx_knn", "**missed**"]]
    assert len(notes) == 1 and notes[0].startswith("10. `approx_knn` (approximate kNN): time exponent 1.16")
    goals = []
    assert "Not run" in section_scale(None, goals, [])
    assert goals[0][2] == "not run"
    assert "speed of 2 workers" not in text
    r["rows"]["negatives"] = row("negatives", "negatives generate, 1 worker", [10.0, 40.0, 160.0], [200.0] * 3)
    r["rows"]["negatives_2w"] = row("negatives", "negatives generate, 2 workers", [8.0, 25.0, 100.0], [200.0] * 3)
    assert "speed of 2 workers over 1 per size: 1.25x / 1.60x / 1.60x." in section_scale(r, [], [])


def test_leftright_base_rows_are_keyed_and_ordered_by_their_world_options():
    import argparse

    from bench.bench_leftright_base import row_key, row_order, work_dir
    ns = lambda pool, fixed: argparse.Namespace(object_pool=pool, fixed_order=fixed, out="o")  # noqa: E731
    keys = [row_key(f, ns(p, x)) for f, p, x in
            (("1", 6, True), ("1", None, False), ("default", None, False), ("1", 6, False), ("0.1", 12, True))]
    assert keys == ["1/pool 6/fixed order", "1", "default", "1/pool 6", "0.1/pool 12/fixed order"]
    assert sorted(keys, key=row_order) == ["default", "0.1/pool 12/fixed order", "1", "1/pool 6",
                                           "1/pool 6/fixed order"]
    assert work_dir("1", ns(6, True)).name == "f-1-pool-6-fixed"


def test_gpu_data_probe_sends_the_trainers_uint8_images(monkeypatch, tmp_path):
    """bench_gpu's data path alone builds its batches as the trainer does (the normalisation split
    off to the device), not with open_clip's float transform in the workers."""
    import types

    import torch

    import compclip.trainer.data as data
    from bench.bench_gpu import data_only
    from bench.common import write_caption_shards
    shards = write_caption_shards(tmp_path / "s", [("a red cube", "a cube red")] * 8, 16, per_shard=8,
                                  negatives=1, neighbours=3)
    seen = []
    real = data.make_loader

    def spy(stream, workers, seed, *a, **k):
        for batch in real(stream, workers, seed, *a, **k):
            seen.append(batch)
            yield batch
    monkeypatch.setattr(data, "make_loader", spy)
    out = data_only(shards, "neighbour", 1, types.SimpleNamespace(gpu_arch="micro-vit-32", gpu_batch=4, gpu_workers=0), 2)
    assert out["batches"] == 2 and out["anchors_per_s"] > 0
    images = seen[0][0].images  # (Batch, its provenance)
    assert images.dtype == torch.uint8 and images.shape[0] == 8  # 4 anchors + their neighbour partners


def test_gpu_data_probe_times_eight_batches_per_worker():
    import types

    from bench.bench_gpu import probe_batches
    assert [probe_batches(types.SimpleNamespace(quick=False, gpu_workers=w)) for w in (12, 2, 0)] == [96, 30, 30]
    assert probe_batches(types.SimpleNamespace(quick=True, gpu_workers=12)) == 10


def test_bench_eval_epochs_needs_a_later_evaluation(monkeypatch, capsys):
    from bench import bench_eval_epochs
    monkeypatch.setattr(sys, "argv", ["bench_eval_epochs.py", "--evals", "1"])
    with pytest.raises(SystemExit) as err:
        bench_eval_epochs.main()
    assert err.value.code == 2 and "--evals must be at least 2" in capsys.readouterr().err


def test_leftright_shape_pairs_asks_each_pair_of_shapes_only_about_itself(tmp_path):
    """bench_leftright_shape_pairs: one VG-Relation set per pair of shapes (15), its left/right
    items naming exactly that pair, true against the arguments swapped."""
    from bench.bench_leftright_shape_pairs import pair_sets
    from compclip.datagen.world.splits import Split
    roots = pair_sets(Split.make(0), seed=0, items=4, work=tmp_path)
    assert len(roots) == 15
    for pair, root in roots.items():
        items = [x for x in json.loads((root / "aro" / "visual_genome_relation.json").read_text())
                 if x["relation_name"] in ("to the left of", "to the right of")]
        assert len(items) == 4 and sum(x["relation_name"] == "to the left of" for x in items) == 2
        for x in items:
            assert " / ".join(sorted((x["obj1_name"].split()[-1], x["obj2_name"].split()[-1]))) == pair
            assert x["false_caption"] == x["true_caption"].replace(x["obj1_name"], "\0").replace(
                x["obj2_name"], x["obj1_name"]).replace("\0", x["obj2_name"])


def test_cpu_id_tells_apart_machines_of_one_model_name():
    """Two "AMD EPYC" machines of another family or SIMD set get different ids (machine_info's
    `cpu_id`); fields are read from the first processor only."""
    def info(family, flags):
        one = f"model name\t: AMD EPYC\ncpu family\t: {family}\nmodel\t\t: 1\nflags\t\t: fpu {flags}\n"
        return one + "\n" + one.replace(f": {family}", ": 99")
    assert common.cpu_id(info(25, "sse avx avx2")) == "family 25 model 1, avx2"
    assert common.cpu_id(info(25, "avx2 avx512f avx512_bf16")) == "family 25 model 1, avx2 avx512f avx512_bf16"
    assert common.cpu_id(info(23, "sse")) == "family 23 model 1, no avx2"
    assert "cpu_id" in common.machine_info()
