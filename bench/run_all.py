"""Run every benchmark and write bench/RESULTS.md: the one command.

    .venv/bin/python bench/run_all.py            # full run (~60 min on a quiet 2-core box)
    .venv/bin/python bench/run_all.py --quick    # smoke check (~9 min): small sizes, few repetitions
    .venv/bin/python bench/run_all.py --report-only   # re-render RESULTS.md from the JSON files

Each bench script runs as a subprocess (one after the other, never two at once: they would
slow each other down), writes `<results-dir>/<name>.json`, and this script renders the report
from those files: machine, versions, git commit, the exact commands, median and range of every
repetition, each goal and whether it is met, and notes on the misses. Progress goes to stderr.
A full run writes bench/results/*.json and bench/RESULTS.md; `--quick` writes
bench/results/quick/*.json and bench/RESULTS-quick.md, so a smoke check never replaces the
numbers of a full run. All scripts get `OMP_NUM_THREADS=MKL_NUM_THREADS=OPENBLAS_NUM_THREADS=
--threads` (default 1: per-core numbers; on a shared 2-core box more threads per process ran
several times slower), except the exact-kNN timing, which gets every core (`--knn-threads`),
as the BLAS bound is the machine's. The trainer bench sets threads per case itself.
When torch sees a CUDA device, the GPU rows run too (`bench/bench_gpu.py` and `bench/bench_eval.py
--device cuda`, RESULTS.md section 9); without one, each is recorded as not run (no CUDA device)
in the run's table and nothing is measured.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS_DIR, command_line, fmt_num, fmt_stat, git_commit, log, machine_info, \
    markdown_table, now, versions  # noqa: E402

# name -> (script, json file, full args, quick args, env overrides)
STEPS = {
    "vs_open_clip": ("bench/bench_vs_open_clip.py", "vs_open_clip", [], ["--quick"], {}),
    "trainer": ("bench/bench_trainer.py", "trainer", [], ["--quick"], {}),
    "negatives": ("bench/bench_negatives.py", "negatives", [], ["--quick"], {}),
    "knn": ("bench/bench_images.py", "images", ["--only", "exact", "--n-exact", "50000"],
            ["--only", "exact", "--n-exact", "10000"], {"threads": "knn"}),
    "images": ("bench/bench_images.py", "images", ["--only", "stitch,generate"],
               ["--only", "stitch,generate", "--n-pairs", "50", "--n-images", "32"], {}),
    "eval": ("bench/bench_eval.py", "eval", [], ["--quick"], {}),
    "world": ("bench/bench_world.py", "world", ["--no-build"], ["--quick"], {}),
    "same_image": ("bench/bench_same_image.py", "same_image", [], ["--quick"], {}),
    "loader": ("bench/bench_loader.py", "loader", [], ["--quick"], {}),
    "scale": ("bench/bench_scale.py", "scale", [], ["--quick"], {}),
    # the GPU rows: run only when torch sees a CUDA device (`needs`); ARO and left-right need spaCy
    "gpu": ("bench/bench_gpu.py", "gpu", [], ["--quick"], {"needs": "cuda"}),
    "gpu_eval": ("bench/bench_eval.py", "gpu_eval",
                 ["--device", "cuda", "--arch", "ViT-B-32", "--batch-size", "256", "--reps", "2", "--benchmarks",
                  "bivlc", "retrieval", "sugarcrepe", "sugarcrepe_pp", "visla", "visla_lexical", "zeroshot"],
                 ["--device", "cuda", "--quick"], {"needs": "cuda"}),
}
NO_CUDA = "not run: no CUDA device (torch.cuda.is_available() is False)"


def cuda_visible() -> bool:
    import torch
    return torch.cuda.is_available()
GPU_GOAL = 1300


def run_step(name: str, args, env: dict, results_dir: Path, cuda: bool = False) -> dict:
    script, json_name, full, quick, over = STEPS[name]
    out = results_dir / f"{json_name}.json"
    cmd = [sys.executable, script] + (quick if args.quick else full) + ["--out", str(out)]
    if over.get("needs") == "cuda" and not cuda:
        shown = command_line(cmd[1:]).replace(str(ROOT) + "/", "")
        log(f"== {name}: {NO_CUDA}")
        return {"name": name, "command": shown, "env_threads": None, "returncode": None, "skipped": NO_CUDA,
                "wall_s": 0.0}
    step_env = dict(env)
    if over.get("threads") == "knn":
        cmd += ["--threads", str(args.knn_threads)]
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            step_env[var] = str(args.knn_threads)
    shown = command_line(cmd[1:]).replace(str(ROOT) + "/", "")
    log(f"== {name}: {shown}")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=step_env, stdout=sys.stderr, stderr=sys.stderr,
                              timeout=args.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = time.perf_counter() - start
    log(f"== {name}: {'ok' if rc == 0 else f'FAILED ({rc})'} in {wall:.0f} s")
    return {"name": name, "command": shown, "env_threads": step_env.get("OMP_NUM_THREADS"),
            "returncode": rc, "wall_s": round(wall, 1)}


# --- the report -------------------------------------------------------------------------------

def yes(flag) -> str:
    return "-" if flag is None else ("**met**" if flag else "**missed**")


def _get(d, *keys, default=None):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def render(res: dict, run: dict) -> str:
    """RESULTS.md from the bench JSON (`res`: name -> dict or None) and this run's info."""
    quick = run.get("quick")
    L: list[str] = []
    L.append("# Benchmark results" + (" (QUICK smoke check: small sizes, few repetitions; do not cite)" if quick else ""))
    L.append("")
    L.append("Written by `bench/run_all.py` from `" + run["results_dir"] + "/*.json`; do not edit by hand "
             "(see `docs/bench.md`). Cells read `median (min–max, n=repetitions)`.")
    L.append("")
    m, v = run["machine"], run["versions"]
    gpu = m.get("gpu")
    L += ["## Run", "",
          f"- command: `{run['command']}`",
          f"- date: {run['date']}; whole run {fmt_num(run.get('wall_s'))} s",
          f"- git commit: {run['git_commit']}",
          f"- machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['platform']}",
          f"- GPU: {gpu or 'none on this machine: the GPU rows were not run (section 9 shows the JSON of a GPU machine, if any)'}",
          f"- load average (1, 5, 15 min) at start: {run['load_start']}; at end: {run.get('load_end')} "
          "(above 0 means other work shared the CPU; repetitions are interleaved so drift hits all cases alike)",
          f"- threads: OMP/MKL/OpenBLAS = {run['threads']} per process unless a row says otherwise; "
          f"exact kNN with {run['knn_threads']}",
          "- versions: " + ", ".join(f"{k} {val or 'not installed'}" for k, val in v.items()), ""]
    L.append(markdown_table(["script", "exact command", "wall s", "status"],
                            [[s["name"], f"`{s['command']}`", fmt_num(s["wall_s"]),
                              s.get("skipped") or ("ok" if s["returncode"] == 0 else f"FAILED ({s['returncode']})")]
                             for s in run["steps"]], align=["l", "l", "r", "l"]))
    L.append("")
    goals, notes = [], []
    sections = []
    for title, fn, args in (("1. vs open_clip_train", section_vs_open_clip, (res.get("vs_open_clip"),)),
                            ("2. hard negatives", section_negatives_cost, (res.get("trainer"),)),
                            ("3. scaling", section_scaling, (res.get("trainer"),)),
                            ("4. datagen", section_datagen, (res.get("negatives"), res.get("images"), res.get("world"))),
                            ("5. eval", section_eval, (res.get("eval"),)),
                            ("6. same-image pairs", section_same_image, (res.get("same_image"),)),
                            ("7. today vs before issue 18", section_today_vs_old, (res.get("trainer"),)),
                            ("8. loader per worker", section_loader, (res.get("loader"),)),
                            ("9. GPU", section_gpu, (res.get("gpu"), res.get("gpu_eval"))),
                            ("10. scale", section_scale, (res.get("scale"),))):
        try:
            sections.append(fn(*args, goals, notes))
        except (KeyError, TypeError, ValueError, AttributeError) as err:  # e.g. a JSON file from an older script
            sections.append(f"## {title}\n\nCould not render from the JSON ({type(err).__name__}: {err}); "
                            "re-run that script.")
            goals.append([title, "-", "not rendered", "-"])
    L += ["## Goals", "", markdown_table(["item", "goal", "measured", "status"], goals,
                                         align=["l", "l", "l", "l"]), ""]
    for s in sections:
        L += [s, ""]
    L += ["## Notes on misses and where the time goes", ""]
    L += [f"- {n}" for n in notes] if notes else ["- every goal measured here was met."]
    L.append("")
    return "\n".join(L)


def section_vs_open_clip(r, goals, notes) -> str:
    head = "## 1. Our trainer vs open_clip_train (one process, plain CLIP, same optimiser)\n\n"
    item = "1. ours / open_clip_train samples/s, same optimiser, COCO-length captions"
    if not r:
        goals.append([item, ">= 1.3x", "not run", "-"])
        return head + "Not run."
    ratio = r["ratio_ours_over_theirs"]
    goal = r.get("goal", ">= 1.3").split(" ")[:2]
    goals.append([item, "".join(goal) + "x", fmt_stat(ratio, "x"), yes(r["goal_met"])])
    if not r["goal_met"]:
        notes.append(f"1. ours / open_clip_train at the same optimiser is {fmt_num(ratio['median'])}x "
                     f"(goal {' '.join(goal)}x). Per-run numbers in vs_open_clip.json; how to profile in docs/bench.md.")
    rows = [["ours, " + _get(r, "optimizer", "ours", default="?"), fmt_stat(r["ours"]["samples_per_s"]),
             fmt_stat(r["ours"]["run_wall_s"])],
            ["open_clip_train (CSV data), " + _get(r, "optimizer", "open_clip_train", default="?"),
             fmt_stat(r["open_clip_train"]["samples_per_s"]), fmt_stat(r["open_clip_train"]["run_wall_s"])],
            ["**ratio ours / theirs, same optimiser (paired runs)**", fmt_stat(ratio, "x"), ""]]
    if r.get("ours_fused"):
        rows += [["ours, " + _get(r, "optimizer", "ours_fused", default="?"),
                  fmt_stat(r["ours_fused"]["samples_per_s"]), fmt_stat(r["ours_fused"]["run_wall_s"])],
                 ["ratio ours-fused / theirs (secondary: different optimiser kernels)",
                  fmt_stat(r["ratio_ours_fused_over_theirs"], "x"), ""]]
    caps = r.get("captions", {})
    toks = caps.get("tokens_with_start_end", {})
    return head + (
        f"`{r['arch']}`, batch {r['batch']}, {r['steps']} steps per run, fp32, {r['workers']} data-loader worker(s), "
        f"{r['threads']} thread(s), {r['reps']} runs each, interleaved and counterbalanced. Captions: "
        f"{caps.get('source', 'fixture')} ({caps.get('distinct', '?')} distinct, {fmt_num(toks.get('median'))} tokens "
        f"median, {fmt_num(toks.get('max'))} max, of a 77-token context); images: 32 px fixture scenes. "
        f"Same optimiser: {r.get('same_optimizer', '?')}. samples/s: steady state from the wall times of each "
        f"trainer's own TensorBoard events, between the first log at or after step {r['warmup_steps']} and the "
        f"last step (start-up and checkpointing excluded).\n\n"
        + markdown_table(["trainer", "samples/s", "whole run, s (incl. start-up)"], rows))


def section_negatives_cost(r, goals, notes) -> str:
    head = "## 2. Cost of hard negatives vs encoder FLOPs\n\n"
    if not r:
        goals.append(["2. hard-negative cost / FLOP ratio", "<= 1.1", "not run", "-"])
        return head + "Not run."
    fl, hard, step = r["flops"], r.get("hard_negatives", {}), r.get("step_only", {})
    plain_run = _get(r, "cases", "plain_1proc", "samples_per_s")
    comp = _get(r, "compose", "cpu_ms_per_anchor") or {}
    rows = [["plain CLIP, B x B", fmt_stat(plain_run), "1.00", "1.00", "1.00", "-", "-", fmt_stat(comp.get("plain"))]]
    for shape, s in fl["shapes"].items():
        if shape == "plain":
            continue
        h = hard.get(shape)
        sc = _get(step, "cost_vs_plain", shape)
        if h:
            ratio, met = h["cost_over_flop_ratio"], h["goal_met"]
            measured = f"{fmt_stat(h['cost'], 'x')} (whole runs)"
        elif sc:
            ratio = round(sc["median"] / s["flop_ratio"], 3)
            met, measured = sc["median"] <= 1.1 * s["flop_ratio"], f"{fmt_stat(sc, 'x')} (step only)"
        else:
            ratio, met, measured = None, None, "not run"
        rows.append([s["label"], fmt_stat(h["samples_per_s"]) if h else "not run", measured,
                     fmt_stat(sc, "x") if sc else "-", f"{s['flop_ratio']:.2f}", fmt_num(ratio), yes(met),
                     fmt_stat(comp.get(shape))])
        goals.append([f"2. {s['label']}: cost / FLOP ratio", "<= 1.1",
                      f"{fmt_num(ratio)}: cost {measured} / FLOPs {s['flop_ratio']:.2f}x", yes(met)])
        if met is False:
            extra = ""
            if h and sc:
                extra = (f" Compute alone (step only) costs {fmt_num(sc['median'])}x, so "
                         + ("the excess is outside the model step (data loading / composing)."
                            if sc["median"] <= 1.1 * s["flop_ratio"] else "the model step itself exceeds the FLOPs."))
            cp, cs = _get(comp, "plain", "median"), _get(comp, shape, "median")
            if cp and cs:
                extra += (f" Its data path costs {fmt_num(cs)} ms CPU per anchor against plain's {fmt_num(cp)} "
                          "(in the loader worker, which only stays off the critical path while the second core "
                          f"is free; load average at the start of the trainer bench: "
                          f"{_get(r, 'meta', 'machine', 'load_avg')}).")
            notes.append(f"2. {s['label']} costs {measured} against {s['flop_ratio']:.2f}x FLOPs.{extra}")
    ctx_flops = fl.get("text_forward_flops_full_context", fl.get("text_forward_flops"))
    lengths = ", ".join(f"{s['label'].split(',')[0]} {fmt_num(s['expected_text_length'])}"
                        for s in fl["shapes"].values() if "expected_text_length" in s)
    txt = (f"Encoder forward FLOPs of `{fl['arch']}`: matmuls counted by torch.utils.flop_counter plus "
           "attention's sequence-length-dependent QK^T and AV (4 L^2 d per layer, added; the counter misses "
           f"CPU's fused attention): image {fl['image_forward_flops'] / 1e6:.1f} MFLOP, text at the full "
           f"context {ctx_flops / 1e6:.1f} MFLOP; today's trainer encodes each batch's texts at its longest "
           f"caption ({fl.get('text_length_today', '?')}), expected tokens per shape: {lengths or '-'}. "
           "FLOP ratio = encoder FLOPs per anchor against plain's (image + text); forward + backward is "
           f"~3x forward for both towers (counted: {fl['shapes']['plain']['train_step_over_forward']:.2f}x for a plain "
           "train step incl. the loss), so the forward ratio is the training ratio. Cost = plain samples/s / "
           "shape's samples/s, paired by repetition; samples = anchors. Goal: cost <= 1.1 x FLOP ratio "
           "(cheaper than FLOPs is fine: per-step fixed costs such as AdamW are shared).\n\n")
    if r.get("cases"):
        txt += (f"Whole runs: `trainer/train.py`, batch {r['batch_per_process']} anchors, {r['steps']} steps, "
                f"{r['workers_per_process']} data worker, 1 thread, {r['reps']} interleaved repetitions, samples/s "
                f"in the steady state after {r['warmup_steps']} steps. Step only: forward + backward + AdamW on "
                f"random tensors in this process ({_get(step, 'rounds')} rounds). Data path: CPU ms per anchor "
                "of reading, decoding, augmenting, partner lookup, negatives, tokenising and collating, in-process "
                "(in training it runs in the loader worker, beside the model step).\n\n")
    return head + txt + markdown_table(
        ["shape", "samples/s (runs)", "cost (runs)", "cost (step only)", "FLOP ratio", "cost / FLOP ratio", "goal",
         "data path, CPU ms/anchor"], rows)


def section_scaling(r, goals, notes) -> str:
    head = "## 3. Scaling\n\n"
    if not r:
        return head + "Not run."
    rows = []
    for name in ("plain_1proc", "plain_1proc_2thr", "plain_2proc"):
        c = _get(r, "cases", name)
        if c:
            rows.append([name, c["processes"], c["threads_per_process"], fmt_stat(c["samples_per_s"])])
    sc = r.get("scaling", {})
    txt = "CPU, plain CLIP batch of 32 anchors per process, samples/s global:\n\n"
    txt += markdown_table(["case", "processes", "threads each", "samples/s"], rows) + "\n\n"
    ratios = []
    for key, label in (("2proc_over_1proc", "2 processes / 1 process (1 thread each)"),
                       ("2proc_over_1proc_2threads", "2 processes / 1 process with 2 threads (same cores)"),
                       ("2threads_over_1thread", "1 process: 2 threads / 1 thread")):
        if key in sc:
            ratios.append([label, fmt_stat(sc[key], "x")])
    ddp = sc.get("step_only_ddp")
    if ddp:
        ratios.append(["step only (DDP over gloo, random tensors): 2 processes / 1 process",
                       fmt_stat(ddp["2proc_over_1proc"], "x")])
    if ratios:
        txt += markdown_table(["ratio", "value"], ratios) + "\n\n"
    if ddp:
        txt += (f"Step only, per step: 1 process {fmt_stat(ddp['step_s']['1proc'], ' s')}, 2 processes "
                f"{fmt_stat(ddp['step_s']['2proc'], ' s')}; one all-reduce of the {ddp['parameters'] / 1e6:.1f}M-parameter "
                f"gradient alone {fmt_stat(ddp['gradient_allreduce_s'], ' s')}.\n\n")
    two = sc.get("2proc_over_1proc")
    if two:
        goals.append(["3. CPU: 2 processes / 1 process", "none set (2 cores: at most 2x)", fmt_stat(two, "x"), "-"])
        if two["median"] < 1.8:
            parts = [f"3. Two CPU processes give {fmt_num(two['median'])}x of one on "
                     f"{_get(r, 'meta', 'machine', 'cores')} cores (load average at the start of the trainer "
                     f"bench: {_get(r, 'meta', 'machine', 'load_avg')})."]
            if ddp:
                a, b = ddp["step_s"]["1proc"]["median"], ddp["step_s"]["2proc"]["median"]
                ar = ddp["gradient_allreduce_s"]["median"]
                parts.append(f"Without data loading the bound is {fmt_num(ddp['2proc_over_1proc']['median'])}x: "
                             f"a step takes {fmt_num(b)} s in each of 2 processes against {fmt_num(a)} s alone, of which "
                             f"the gradient all-reduce over gloo is about {fmt_num(ar)} s "
                             "(the rest is the two processes sharing memory bandwidth and caches).")
            comp = _get(r, "compose", "cpu_ms_per_anchor", "plain")
            if comp:
                parts.append(f"The data path costs {fmt_num(comp['median'])} ms CPU per anchor in each process's "
                             "loader worker: with one process it runs on the otherwise idle second core, with two "
                             "it takes time from the training processes.")
            notes.append(" ".join(parts))
    gpu = r.get("gpu", {})
    if gpu.get("ran"):
        goals.append(["3. GPU: ViT-B-32, NegCLIP-style batch", f">= {GPU_GOAL} samples/s per H100",
                      f"{fmt_num(gpu['samples_per_s'])} on {gpu.get('device')}", yes(gpu.get("goal_met"))])
        txt += (f"GPU ({gpu.get('device')}): ViT-B-32, bf16, batch {gpu['batch']} as {gpu['shape']}: "
                f"**{fmt_num(gpu['samples_per_s'])} samples/s** (goal {GPU_GOAL} per H100).\n")
    else:
        goals.append(["3. GPU: ViT-B-32, NegCLIP-style batch", f">= {GPU_GOAL} samples/s per H100",
                      "not measured: no GPU was lent to this run", "-"])
        txt += ("**GPU: not measured. No GPU was lent to this run, and no number is given for it.** "
                "On a machine with an H100 (CUDA visible), run\n\n"
                f"    {gpu.get('command', '.venv/bin/python bench/bench_trainer.py --gpu')}\n\n"
                f"It runs {gpu.get('what_it_runs', '')}; the goal is {GPU_GOAL} samples/s per H100.\n")
    return head + txt


def section_datagen(neg, img, world, goals, notes) -> str:
    out = ["## 4. Datagen", ""]
    if neg:
        st = neg["stages"]
        rows = []
        for label in ("swap", "replace", "add", "all"):
            e2e, rules = st.get(f"end_to_end:{label}"), st.get(f"rules:{label}")
            met = neg["goals"][label]["goal_met"]
            rows.append([label, fmt_stat(e2e["per_cpu_s"]), fmt_stat(e2e["per_wall_s"]),
                         fmt_stat(rules["per_cpu_s"]) if rules else "-", e2e.get("negatives"), yes(met)])
            goals.append([f"4. negatives `{label}`: captions/s per core", ">= 1,000",
                          fmt_stat(e2e["per_cpu_s"]), yes(met)])
            if not met:
                share = neg.get("time_share_of_end_to_end_cpu", {})
                notes.append(f"4. negatives `{label}`: {fmt_num(e2e['per_cpu_s']['median'])} captions per CPU second; "
                             f"CPU shares of `all`: parse {share.get('parse')}, view {share.get('view')}, "
                             f"rules {share.get('rules')}.")
        for name, label in (("whole_command", "with the plausibility filter"),
                            ("whole_command_no_lm", "without the filter")):
            if name in st:
                rate = neg["goals"][name]
                goals.append([f"4. negatives CLI, whole command, {st[name]['captions']:,} captions, 1 worker, {label}",
                              ">= 700/s wall", fmt_stat(st[name]["per_wall_s"]), yes(rate["goal_met"])])
        out += [f"Rule negatives, {neg['corpus']} ({neg['captions']} captions), {neg['threads']} thread, "
                f"{neg['reps']} repetitions. End to end = spaCy parse + view + rules of that kind in one process; "
                "per core = per CPU second of the process (and its finished workers).", "",
                markdown_table(["kind", "end to end /CPU s", "end to end /wall s", "rules only /CPU s",
                                "negatives made", "goal >= 1,000/core"], rows), ""]
        share = neg.get("time_share_of_end_to_end_cpu")
        if share:
            out += [f"Where the CPU time of `all` goes: parse {share['parse']:.0%}, view {share['view']:.0%}, "
                    f"rules {share['rules']:.0%}.", ""]
        extra = [[k, fmt_stat(v["per_wall_s"]), fmt_stat(v["per_cpu_s"])] for k, v in st.items()
                 if k.startswith(("parse", "generate_workers"))]
        if extra:
            out += [markdown_table(["stage", "captions per wall s", "per CPU s"], extra), ""]
    else:
        out += ["Negatives: not run.", ""]
        goals.append(["4. negatives captions/s per core", ">= 1,000", "not run", "-"])
    ex = _get(img, "exact_knn")
    if ex and isinstance(ex.get("exact", {}).get("seconds"), dict):
        rows = [["exact kNN (datagen.images.knn, method exact)", fmt_stat(ex["exact"]["seconds"]),
                 fmt_stat(ex["exact"]["ratio_to_bound"], "x")],
                ["BLAS bound: N x N products alone (numpy)", fmt_stat(ex["blas_bound_s"]), "1.00x"],
                ["peak bound: same FLOPs at the best GEMM rate", fmt_num(ex["peak_bound_s"]), "-"]]
        if "flat" in ex:
            rows.insert(1, ["faiss IndexFlatIP", fmt_stat(ex["flat"]["seconds"]), fmt_stat(ex["flat"]["ratio_to_bound"], "x")])
        out += [f"kNN build, N={ex['n']:,} x d={ex['d']}, k={ex['k']}, clustered synthetic embeddings "
                f"(peak GEMM {ex['peak_gemm_gflops']} GFLOP/s):", "",
                markdown_table(["", "seconds", "vs BLAS bound"], rows), ""]
        ratio = ex["exact"]["ratio_to_bound"]
        goals.append(["4. exact kNN self-join vs the full N x N GEMM", "<= 0.6x", fmt_stat(ratio, "x"),
                      yes(ratio["median"] <= 0.6)])
    rows = []
    st = _get(img, "stitch")
    if st and isinstance(st.get("pairs_per_s"), dict):
        rows.append([f"stitched pairs ({st['canvas']} px {st['ext']}, bank {st['bank']})", "pairs/s",
                     fmt_stat(st["pairs_per_s"])])
    gen = _get(img, "generate") or {}
    if isinstance(_get(gen, "renderer", "images_per_s"), dict):
        rows.append([f"rendered images (renderer backend, {gen['renderer']['size']} px)", "images/s",
                     fmt_stat(gen["renderer"]["images_per_s"])])
    if isinstance(_get(gen, "tiny_diffusers", "images_per_s"), dict):
        t = gen["tiny_diffusers"]
        rows.append([f"tiny random diffusers pipeline ({t['size']} px, {t['steps']} steps; plumbing only)",
                     "images/s", fmt_stat(t["images_per_s"])])
    for key, v in (_get(world, "render") or {}).items():
        rows.append([f"world render {key.replace('_', ' + ')}", "images/s (wall)", fmt_stat(v["per_s_wall"])])
    for key, v in (_get(world, "train") or {}).items():
        rows.append([f"world training samples, {key}", "samples/s (wall)", fmt_stat(v["per_s_wall"])])
    if rows:
        out += ["Images:", "", markdown_table(["what", "unit", "rate"], rows, align=["l", "l", "r"]), ""]
    return "\n".join(out)


def section_eval(r, goals, notes) -> str:
    head = "## 5. Eval\n\n"
    if not r:
        goals.append(["5. encoder calls per unique text / image", "exactly 1", "not run", "-"])
        return head + "Not run."
    rows = []
    for name, b in r["per_benchmark"].items():
        c = b["encoder_calls"]
        rows.append([name, b["items"], fmt_stat(b["items_per_s"]), f"{c['texts_encoded']} / {c['unique_texts']}",
                     fmt_num(c["encodes_per_unique_text"]), f"{c['images_encoded']} / {c['unique_images']}",
                     fmt_num(c["encodes_per_unique_image"])])
    s = r["all_benchmarks_shared_cache"]
    rows.append(["all, one shared cache", "", f"{fmt_num(s['seconds'])} s", f"{s['texts_encoded']} / {s['unique_texts']}",
                 fmt_num(s["encodes_per_unique_text"]), f"{s['images_encoded']} / {s['unique_images']}",
                 fmt_num(s["encodes_per_unique_image"])])
    worst_t = max((c["encoder_calls"]["encodes_per_unique_text"] or 0) for c in r["per_benchmark"].values())
    worst_i = max((c["encoder_calls"]["encodes_per_unique_image"] or 0) for c in r["per_benchmark"].values())
    goals.append(["5. encoder calls per unique text / image", "exactly 1",
                  f"max over benchmarks: {fmt_num(worst_t)} / {fmt_num(worst_i)}", yes(r["goal_met"])])
    if not r["goal_met"]:
        notes.append("5. some text or image reached the encoder more than once; see eval.json encoder_calls.")
    return head + (
        f"`{r['arch']}` (random init), synthetic fixture (n={r['fixture_n']}), batch {r['batch_size']}, "
        f"{r['torch_threads']} torch thread(s), {r['reps']} repetitions; time = {r['timing']}. "
        "Encoded / unique: items that reached the encoder / distinct texts (strings) or image references the "
        "benchmark asked for.\n\n"
        + markdown_table(["benchmark", "items", "items/s", "texts encoded / unique", "per unique text",
                          "images encoded / unique", "per unique image"], rows))


def section_same_image(r, goals, notes) -> str:
    head = "## 6. Same-image pairs per batch (5 captions per image)\n\n"
    goal = "<= 0.5 % (global order, buffer 2,000)"
    if not r:
        goals.append(["6. anchors sharing their image in a batch of 256", goal, "not run", "-"])
        return head + "Not run."
    rows = [[x["order"], x["reader"], f"{x['shuffle_buffer']:,}" if x["shuffle_buffer"] else "- (exact pass)",
             x["batches"], f"{100 * x['same_image_share']:.2f} %", x.get("unmasked_same_image_pairs", "-")]
            for x in r["rows"]]
    after = next(x for x in r["rows"] if x["order"] == "global order" and x["shuffle_buffer"] == 2000)
    goals.append(["6. anchors sharing their image in a batch of 256", goal,
                  f"{100 * after['same_image_share']:.2f} %", yes(r["goal_met"])])
    if not r["goal_met"]:
        notes.append(f"6. {100 * after['same_image_share']:.2f} % of anchors share their image with another "
                     f"anchor of their batch (uniform random order: {100 * r['expected_uniform_random']:.2f} %).")
    return head + (
        f"{r['images']:,} images x {r['captions_per_image']} captions in Karpathy order, written in input "
        f"order (as before issue 15) and in the global order every datagen writer now uses, shards of "
        f"{r['shard_size']:,}; streamed by the trainer's `ShardStream` (resampled shards) in batches of 256, "
        f"and the input-order set read by the exact-pass epochs the papers' recipes use (`ExactStream`). "
        f"Share of anchors whose image is also another anchor's in the same batch (uniformly random order: "
        f"{100 * r['expected_uniform_random']:.2f} %), and the same-image pairs the loss's mask "
        f"(`loss.mask_same_image`) leaves as negatives:\n\n"
        + markdown_table(["written order", "reader", "shuffle buffer", "batches", "same-image anchors",
                          "left unmasked"], rows, align=["l", "l", "r", "r", "r", "r"]))


def section_today_vs_old(r, goals, notes) -> str:
    head = "## 7. Today's trainer vs the code before issue 18 (same run, COCO-length captions)\n\n"
    tv = (r or {}).get("today_vs_old")
    item = "7. NegCLIP-style anchors/s, today / before issue 18"
    if not tv:
        goals.append([item, ">= 1.4x", "not run", "-"])
        return head + "Not run."
    old_hard = _get(r, "hard_negatives", "old_code", default={})
    rows = []
    for shape, t in tv.items():
        h_new, h_old = _get(r, "hard_negatives", shape), old_hard.get(shape)
        rows.append([t["label"], fmt_stat(t["old"]), fmt_stat(t["today"]), fmt_stat(t["today_over_old"], "x"),
                     f"{fmt_num(t['old_over_new_flops'])}x",
                     fmt_num(h_old["cost_over_flop_ratio"]) if h_old else ("1.00" if shape == "plain" else "-"),
                     fmt_num(h_new["cost_over_flop_ratio"]) if h_new else ("1.00" if shape == "plain" else "-")])
    neg = tv.get("negclip")
    if neg:
        goals.append([item, ">= 1.4x", fmt_stat(neg["today_over_old"], "x"), yes(neg.get("goal_met"))])
        if not neg.get("goal_met"):
            notes.append(f"7. NegCLIP-style batches run {fmt_num(neg['today_over_old']['median'])}x the code of "
                         f"{r.get('old_commit')} (goal 1.4x); its FLOPs fell {fmt_num(neg['old_over_new_flops'])}x.")
    else:
        goals.append([item, ">= 1.4x", "not run", "-"])
    return head + (
        f"Each layout run whole by today's `trainer/train.py` and by the one of commit `{r.get('old_commit')}` "
        "(written with `git archive` to a temporary folder, run with its own code first on sys.path and the same "
        f"venv), same recipe and shards, runs interleaved; batch {r['batch_per_process']} anchors, {r['steps']} "
        f"steps, 1 process, 1 thread, {r['workers_per_process']} data worker, {r['reps']} repetitions. Captions "
        "and hard negatives: real COCO captions (SugarCrepe's caption / negative_caption fields); images: 32 px "
        "fixture scenes. Left-right: the recipe's 448 + 32 of 480 scaled to 30 + 2 of 32, with mirrored "
        "partners. FLOPs fewer = the old code's encoder FLOPs per anchor / today's (text at 77 tokens vs the "
        "batch's longest caption); cost / FLOP ratio of each code against its own plain run and FLOPs "
        "(section 2's measure).\n\n"
        + markdown_table(["layout", f"before ({r.get('old_commit')}) anchors/s", "today anchors/s", "today / before",
                          "FLOPs fewer", "cost / FLOP ratio, before", "cost / FLOP ratio, today"], rows))


def section_loader(r, goals, notes) -> str:
    head = "## 8. Loader throughput per worker (640 x 480 JPEGs, 224 px output)\n\n"
    item = "8. loader: NegCLIP-style anchors/s per worker (jpeg_draft, uint8)"
    if not r:
        goals.append([item, ">= 120", "not run", "-"])
        return head + "Not run."
    rows = []
    for key, row in r["rows"].items():
        rows.append([row["label"], f"{row['images_per_anchor']:.3g}", "on" if row["jpeg_draft"] else "off",
                     row["output"], fmt_stat(row["cpu_anchors_per_s"]), fmt_stat(row["loader_anchors_per_s"])])
    goal_row = r["rows"].get("negclip/draft/uint8")
    goals.append([item, ">= 120", fmt_stat(goal_row["cpu_anchors_per_s"]) + " per CPU-second" if goal_row else "not run",
                  yes(r.get("goal_met")) if goal_row else "-"])
    if goal_row and not r.get("goal_met"):
        notes.append(f"8. One loader worker composes {fmt_num(goal_row['cpu_anchors_per_s']['median'])} NegCLIP-style "
                     "anchors per CPU-second at 224 px (goal 120); see loader.json for every row.")
    jpeg = r["jpeg"]
    return head + (
        f"{jpeg['distinct']} generated {jpeg['size'][0]} x {jpeg['size'][1]} JPEGs (quality {jpeg['quality']}, "
        f"{fmt_stat(jpeg['kb'], ' KB')}), real COCO captions, through the trainer's data path "
        "(`trainer.streams.train_stream`: Composer + ShardStream, neighbours through keys.tsv; "
        f"`trainer.data.make_loader`), `{r['arch_transform']}`'s train transform, batch {r['batch']} anchors, "
        f"{r['batches']} timed batches after {r['warmup_batches']}, {r['reps']} interleaved repetitions. "
        "anchors/CPU-s: the stream in-process, process time (what one fully busy worker delivers); 1 worker: "
        "a DataLoader with one worker process, wall time (carries the machine's other load). uint8: what "
        "the trainer sends (normalised on the device); float: open_clip's whole transform in the worker.\n\n"
        + markdown_table(["layout", "images/anchor", "jpeg_draft", "output", "anchors/CPU-s", "anchors/s, 1 worker"],
                         rows, align=["l", "r", "l", "l", "r", "r"]))


def section_gpu(r, ev, goals, notes) -> str:
    """One GPU card, one command (bench/bench_gpu.py, launch/gpu_check.sh): ours vs open_clip_train,
    NegCLIP-style, where the time goes; eval on CUDA (bench_eval.py --device cuda). run_all.py runs
    both when CUDA is visible; otherwise the JSON files come from a GPU machine."""
    L = ["## 9. GPU (bench/bench_gpu.py, bench/bench_eval.py --device cuda)", ""]
    if not r:
        goals.append(["GPU: NegCLIP-style anchors/s, ours / open_clip_train", "1,300; >= 1.3x", "not measured", "-"])
        return "\n".join(L + ["Not measured: bench/results/gpu.json is missing (it is written on a GPU machine "
                               "by `python bench/bench_gpu.py`; docs/bench.md, \"GPU\")."])
    m = r["meta"]
    L += [f"- card: {r['device']} (torch.cuda.get_device_name()); machine: {m['machine']['cpu']}, "
          f"{m['machine']['cores']} cores; torch {m['versions'].get('torch')}, open_clip {m['versions'].get('open_clip')}",
          f"- commit: {m['git_commit']}; date: {m['date']}",
          f"- command (every number of this table, one process tree, cases interleaved): `{m['command']}`",
          f"- {r['arch']}, random init, batch {r['batch']}, {r['steps']} steps per run, samples/s over the steps "
          f"after {r['warmup_steps']} (TensorBoard event times), {r['reps']} runs each, {r['workers']} data workers "
          f"each; {r['images']}, COCO captions, 224 px train transform", ""]
    rows = []
    for case, label in (("ours_plain", "ours, plain CLIP (B x B), AdamW foreach"),
                        ("open_clip_train", "open_clip_train, plain CLIP, AdamW default (foreach)"),
                        ("ours_negclip", "ours, NegCLIP-style (2B x 4B), AdamW fused")):
        c = r[case]
        rows.append([label, fmt_stat(c["samples_per_s"]), fmt_num(c.get("peak_memory_allocated_mib")),
                     fmt_num(c.get("card_memory_used_peak_mib"))])
    L.append(markdown_table(["run", "anchors/s", "peak allocated MiB", "card memory.used peak MiB"], rows))
    ratio = r["ratio_ours_over_theirs"]
    neg = r["ours_negclip"]
    L += ["", f"ours / open_clip_train (plain, same optimiser, paired by repetition): {fmt_stat(ratio, 'x')}.",
          f"Memory: {r['memory_note']}."]
    goals.append(["GPU: ours / open_clip_train, plain, same card (" + r["device"] + ")", ">= 1.3x",
                  fmt_stat(ratio, "x"), yes(r["goal_met"])])
    met = yes(neg["goal_met"])
    if "H100" not in r["device"]:
        met += " on this card; the goal is stated for one H100, which this record does not show"
    probe = ((r.get("profile") or {}).get("data_only") or {}).get("negclip")
    if probe and probe["anchors_per_s"] < neg["samples_per_s"]["median"]:
        met += "; above its data path alone (section 9: not settled which one reads the steady rate)"
    goals.append(["GPU: NegCLIP-style anchors/s, " + r["arch"] + " B=" + str(r["batch"]) + " (" + r["device"] + ")",
                  fmt_num(neg["goal_samples_per_s"]), fmt_stat(neg["samples_per_s"]), met])
    prof = r.get("profile") or {}
    if prof:
        d, st = prof["data_only"], prof["step_only"]["anchors_per_s"]
        L += ["", "Where the time goes (same command, after the runs): anchors/s of our data path alone "
              f"({d['plain']['workers']} workers, no model, {d['plain']['batches']} batches timed after "
              f"{d['plain'].get('warm_batches', 4)}) and of the step alone (bf16 forward + backward + AdamW "
              "on random batches, COCO caption lengths, no data loading); a steady run is bounded by the smaller.", ""]
        under = [label for shape, case, label in (("plain", "ours_plain", "plain"),
                                                  ("negclip", "ours_negclip", "NegCLIP-style"))
                 if d[shape]["anchors_per_s"] < r[case]["samples_per_s"]["median"]]
        if under:
            why = (" (fewer warm-up batches than workers: its window held workers' first batches)"
                   if d["negclip"].get("warm_batches", 4) < d["negclip"]["workers"] else "")
            runs = (f"The {under[0]} run itself was" if len(under) == 1
                    else f"The {' and the '.join(under)} runs themselves were")
            L += [f"{runs} faster than the data path alone: either the probe under-reads the data path{why}, or "
                  f"the run's window drew on batches its workers had made before it (the loader holds up to 2 per "
                  f"worker, {2 * d['negclip']['workers']} here, against {r['steps'] - r['warmup_steps']} timed "
                  "steps). Not settled; a run of many more steps would tell.", ""]
        L.append(markdown_table(["shape", "data path alone", "step alone, fused AdamW", "step alone, foreach AdamW"],
                                [["plain", fmt_num(d["plain"]["anchors_per_s"]), fmt_num(st["plain_auto"]),
                                  fmt_num(st["plain_foreach"])],
                                 ["NegCLIP-style", fmt_num(d["negclip"]["anchors_per_s"]), fmt_num(st["negclip_auto"]),
                                  fmt_num(st["negclip_foreach"])]]))
        if not neg["goal_met"]:
            notes.append(f"GPU NegCLIP-style: {fmt_num(neg['samples_per_s']['median'])} anchors/s on {r['device']} "
                         f"against the goal {fmt_num(neg['goal_samples_per_s'])}; the data path alone gave "
                         f"{fmt_num(d['negclip']['anchors_per_s'])} and the step alone {fmt_num(st['negclip_auto'])}: "
                         "JPEG decoding of 2 images per anchor in the workers bounds the run, not the GPU step.")
    if ev:
        L += ["", f"Eval on CUDA: `{ev['meta']['command']}` ({ev.get('device')}, {ev['arch']}, "
              f"synthetic fixture n={ev['fixture_n']}; load + encode + score per benchmark, images decoded on the CPU; "
              f"commit {ev['meta']['git_commit']}, {ev['meta']['date']}):", ""]
        L.append(markdown_table(["benchmark", "items", "items/s"],
                                [[n, b["items"], fmt_stat(b["items_per_s"])] for n, b in ev["per_benchmark"].items()]))
        left_out = sorted({"aro", "left_right"} - set(ev.get("benchmarks") or []))
        if left_out:
            L.append(f"\nNot measured on the GPU: {', '.join(left_out)} (they tag captions with spaCy, which the GPU "
                     "image lacks and the wheel folder does not carry).")
    return "\n".join(L)


def _size(n: float) -> str:
    """600000 -> '600k', 12000000 -> '12M', 15625 -> '15.6k'."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:g}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{fmt_num(seconds)} s"
    return f"{fmt_num(seconds / 60)} min" if seconds < 7200 else f"{fmt_num(seconds / 3600)} h"


def _memory(mib: float) -> str:
    return f"{fmt_num(mib)} MiB" if mib < 1024 else f"{fmt_num(mib / 1024)} GiB"


def section_scale(r, goals, notes) -> str:
    """Issue 37's table from scale.json: per row the sizes, times, peaks, fitted exponents, the
    projections and the flags bench_scale.py set."""
    head = "## 10. Scale: time and peak memory against size (bench/bench_scale.py)\n\n"
    item = "10. every stage linear in time and flat in memory"
    if not r:
        goals.append([item, "no stage flagged", "not run", "-"])
        return head + "Not run."
    th = r["flag_thresholds"]
    goal = (f"time exponent <= {th['time_exponent']} ({', '.join(th['time_not_flagged'])} excepted), "
            f"peak ratio <= {th['peak_ratio']}")
    rows, flagged = [], []
    for name, row in r["rows"].items():
        runs = row["runs"]
        rows.append([f"`{name}`: {row['label']}", " / ".join(_size(x["n"]) for x in runs) + f" {row['unit']}",
                     " / ".join(fmt_num(x["seconds"]) for x in runs), " / ".join(fmt_num(x["peak_rss_mib"]) for x in runs),
                     f"{row['time_exponent']:.2f}", f"{row['memory_exponent']:.2f}", f"{row['peak_ratio']:.2f}x",
                     *[f"{_duration(p['seconds'])}, {_memory(p['peak_rss_mib'])}" for p in row["projected"].values()],
                     "**" + "; ".join(row["flags"]) + "**" if row["flags"] else "-"])
        if row["flags"]:
            flagged.append(name)
            notes.append(f"10. `{name}` ({row['label']}): {'; '.join(row['flags'])}; projected to "
                         + ", ".join(f"{k}: {_duration(p['seconds'])}, {_memory(p['peak_rss_mib'])}"
                                     for k, p in row["projected"].items()) + ".")
    goals.append([item, goal, f"{len(flagged)} of {len(rows)} rows flagged" + (f": {', '.join(flagged)}" if flagged else ""),
                  yes(not flagged)])
    recall = {name: [x["recall"] for x in row["runs"]] for name, row in r["rows"].items()
              if all("recall" in x for x in row["runs"])}
    text = (f"Each size alone in a fresh process, {r['threads']} thread(s). Time: the whole command where the "
            "stage has one, else the library call (each row's command and what its time covers are listed below "
            "the table). Peak: the process's peak resident memory (GNU time), interpreter and imports included. "
            "Exponents: least-squares slope of log time / log peak against log size; peak ratio: largest size / "
            f"smallest; projections extrapolate that fit. Images {r['image_px']} px JPEGs; inputs: docs/bench.md, "
            "\"Scale\".\n\n")
    text += markdown_table(["stage", "sizes", "time s", "peak MiB", "time exp.", "memory exp.", "peak ratio",
                            *[f"{k} ({_size(n)})" for k, n in r["project_to"].items()], "flag"], rows,
                           align=["l", "l", "r", "r", "r", "r", "r"] + ["r"] * len(r["project_to"]) + ["l"])
    text += "\n\n" + "\n".join(f"- `{name}` ({row['measures']}): `{row['runs'][-1]['command']}`"
                                  for name, row in r["rows"].items())
    if {"negatives", "negatives_2w"} <= set(r["rows"]):
        pairs = zip(r["rows"]["negatives"]["runs"], r["rows"]["negatives_2w"]["runs"])
        text += ("\n\n`negatives_2w` against `negatives`, speed of 2 workers over 1 per size: "
                 + " / ".join(f"{one['seconds'] / two['seconds']:.2f}x" for one, two in pairs) + ".")
    if recall:
        text += "\n\n" + "; ".join(f"`{name}` recall@3 per size: {' / '.join(fmt_num(x) for x in vals)}"
                                    for name, vals in recall.items()) + "."
    return head + text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke check: small sizes, few repetitions")
    p.add_argument("--only", nargs="*", choices=list(STEPS), help="run only these steps (the report uses "
                   "whatever JSON is in the results folder for the others)")
    p.add_argument("--skip", nargs="*", default=[], choices=list(STEPS))
    p.add_argument("--threads", type=int, default=1, help="OMP/MKL/OpenBLAS threads per process")
    p.add_argument("--knn-threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=int, default=1800, help="seconds per bench script")
    p.add_argument("--results-dir", default=None, help="default bench/results (quick: bench/results/quick)")
    p.add_argument("--report", default=None, help="default bench/RESULTS.md (quick: bench/RESULTS-quick.md)")
    p.add_argument("--report-only", action="store_true", help="only re-render the report from the JSON")
    args = p.parse_args()
    results_dir = Path(args.results_dir) if args.results_dir else (RESULTS_DIR / "quick" if args.quick else RESULTS_DIR)
    report = Path(args.report) if args.report else ROOT / "bench" / ("RESULTS-quick.md" if args.quick else "RESULTS.md")
    results_dir.mkdir(parents=True, exist_ok=True)
    run_file = results_dir / "run_all.json"
    start = time.perf_counter()
    previous = json.loads(run_file.read_text()) if run_file.is_file() else None
    if args.report_only and previous:
        run = previous
    else:
        run = {"command": command_line(), "date": now(), "quick": args.quick, "git_commit": git_commit(),
               "machine": machine_info(), "versions": versions(), "threads": args.threads,
               "knn_threads": args.knn_threads, "load_start": [round(x, 2) for x in os.getloadavg()],
               "results_dir": str(results_dir.relative_to(ROOT)) if results_dir.is_relative_to(ROOT) else str(results_dir),
               "steps": previous["steps"] if previous and args.only else []}
    failed = False
    if not args.report_only:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions")))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(args.threads)
        names = [n for n in (args.only or list(STEPS)) if n not in args.skip]
        cuda = any(STEPS[n][4].get("needs") == "cuda" for n in names) and cuda_visible()
        for i, name in enumerate(names):
            log(f"[{i + 1}/{len(names)}] {name}")
            step = run_step(name, args, env, results_dir, cuda)
            run["steps"] = [s for s in run["steps"] if s["name"] != name] + [step]
            failed |= not step.get("skipped") and step["returncode"] != 0
        run["wall_s"] = round(time.perf_counter() - start, 1)
        run["load_end"] = [round(x, 2) for x in os.getloadavg()]
        run_file.write_text(json.dumps(run, indent=1) + "\n")
    res = {}
    for name, (_, json_name, *_rest) in STEPS.items():
        path = results_dir / f"{json_name}.json"
        res[name] = json.loads(path.read_text()) if path.is_file() else None
    report.write_text(render({**res, "images": res.get("images") or res.get("knn")}, run))
    log(f"wrote {report}")
    print(report)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
