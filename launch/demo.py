"""The offline demo: synthetic world -> a shared base model -> four finetuning recipes -> comparison.

    bash launch/demo.sh                          # one seed (the README's main command)
    bash launch/demo.sh --seeds 0 1 2            # several seeds: means and spread (docs/demo.md)

For each seed, everything under `<out>/seed-<s>/`:
1. `world/`: the synthetic world (`python -m datagen.world build --negatives --partners
   generated`): training shards with scene-edit negatives (swap / replace / add on objects,
   attributes, relations), a copy with generated partner images, and every benchmark set.
2. `pretrained.pt`: `recipes/demo_pretrain.yaml`, plain CLIP training from random weights, the
   stand-in for the pretrained CLIP weights the papers start from.
3. `world/train_negclip/`: NegCLIP's data, spaCy swap negatives (`python -m datagen.negatives
   generate --kinds swap`) and the K=3 nearest-neighbour images under the base model
   (`python -m datagen knn`).
4. `runs/<recipe>/`: `demo_clip_ft` (control), `demo_negclip`, `demo_trohn_text`,
   `demo_trohn_img`, each finetuned from `pretrained.pt` for the same number of anchors and
   evaluated on VISLA, SugarCrepe, BiVLC and ARO at every epoch (TensorBoard + `eval.jsonl`).
   Two trainers run at a time, one thread each (both cores busy).
Then `<out>/results.md` and `results.json` (last-epoch metrics per recipe, mean and standard
deviation over seeds, differences to the control) and `comparison.png` / `curves.png`. Every
step is a command a user could type; each one's output goes to `<out>/seed-<s>/logs/`. A step
whose output is complete is not run again and a killed training resumes from its last
checkpoint (`checkpoint.resume=auto`), so a rerun after a kill continues.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINETUNES = ("demo_clip_ft", "demo_negclip", "demo_trohn_text", "demo_trohn_img")
LABELS = {"demo_clip_ft": "control (CLIP-FT)", "demo_negclip": "NegCLIP-style",
          "demo_trohn_text": "TROHN-Text-style", "demo_trohn_img": "TROHN-Img-style"}
LONGEST_FIRST = ("demo_negclip", "demo_trohn_img", "demo_trohn_text", "demo_clip_ft")  # 2B x 4B, 2B x 2B, B x 2B, B x B
TRAIN_SET = {"demo_pretrain": "train", "demo_clip_ft": "train", "demo_negclip": "train_negclip",
             "demo_trohn_text": "train", "demo_trohn_img": "train_generated"}
# (metric, short name): what the table shows; the papers' claims are about these
METRICS = [
    ("sugarcrepe/replace", "SC replace"), ("sugarcrepe/swap", "SC swap"), ("sugarcrepe/add", "SC add"),
    ("sugarcrepe/replace_rel", "SC rel"), ("sugarcrepe/swap_att", "SC swap-att"),
    ("aro/vg_relation/macro", "ARO rel"), ("aro/vg_attribution/macro", "ARO attr"),
    ("aro/coco_order/mean", "ARO order"), ("visla/generic/i2t", "VISLA gen I2T"),
    ("visla/spatial/i2t", "VISLA spa I2T"), ("bivlc/i2t", "BiVLC I2T"), ("bivlc/t2i", "BiVLC T2I"),
    ("bivlc/group", "BiVLC group"),
]


def log(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Seed:
    """The paths and steps of one seed's demo."""

    def __init__(self, out: Path, seed: int, args: argparse.Namespace):
        self.seed, self.args = seed, args
        self.dir = out / f"seed-{seed}"
        self.world, self.runs, self.logs = self.dir / "world", self.dir / "runs", self.dir / "logs"
        self.base = self.dir / "pretrained.pt"
        self.logs.mkdir(parents=True, exist_ok=True)

    def command(self, name: str, cmd: list[str], threads: int) -> subprocess.Popen:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        handle = open(self.logs / f"{name}.log", "w")
        handle.write("$ " + " ".join(cmd) + "\n")
        handle.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
        handle.close()  # the child holds its own copy of the descriptor
        return proc

    def run(self, name: str, cmd: list[str], threads: int = 2) -> None:
        wait([(name, self.command(name, cmd, threads), self)])

    def train_cmd(self, recipe: str) -> list[str]:
        a = self.args
        cmd = [sys.executable, "trainer/train.py", f"recipes/{recipe}.yaml", f"seed={self.seed}",
               f"logging.output_dir={self.runs}", "logging.progress=false", "checkpoint.resume=auto",
               f"data.train_shards=[{self.world / TRAIN_SET[recipe]}]",
               f"eval.data_root={self.world / 'benchmarks'}"]
        if recipe != "demo_pretrain":
            cmd.append(f"model.pretrained={self.base}")
        if a.samples:
            cmd.append(f"data.samples_per_epoch={a.samples}")
        if a.epochs:
            cmd.append(f"schedule.epochs={a.epochs}")
        return cmd

    def done(self, recipe: str) -> bool:
        return (self.runs / recipe / "DONE").is_file()

    # --- steps --------------------------------------------------------------------------------
    def build_world(self) -> None:
        if (self.world / "world.json").is_file():
            return
        log(f"seed {self.seed}: building the synthetic world")
        self.run("world", [sys.executable, "-m", "datagen.world", "build", "--out", str(self.world),
                           "--seed", str(self.seed), "--negatives", "--partners", "generated",
                           "--bench-scale", str(self.args.bench_scale), "--quiet"])

    def pretrain(self) -> None:
        if self.base.is_file():
            return
        log(f"seed {self.seed}: training the base model (stand-in for pretrained CLIP weights)")
        self.run("demo_pretrain", self.train_cmd("demo_pretrain"))
        from models.checkpoint import latest_checkpoint, sidecar_path
        last = latest_checkpoint(self.runs / "demo_pretrain" / "checkpoints")
        shutil.copyfile(sidecar_path(last), sidecar_path(self.base))
        shutil.copyfile(last, self.base.with_suffix(".tmp"))
        os.replace(self.base.with_suffix(".tmp"), self.base)

    def negclip_data(self) -> None:
        swap, out = self.world / "train_swap", self.world / "train_negclip"
        if (out / "manifest.json").is_file() and json.loads((out / "manifest.json").read_text()).get("complete"):
            return
        log(f"seed {self.seed}: NegCLIP data: spaCy swap negatives, then K=3 neighbours under the base model")
        self.run("negatives_swap", [sys.executable, "-m", "datagen.negatives", "generate",
                                    str(self.world / "train"), str(swap), "--kinds", "swap",
                                    "--seed", str(self.seed), "--quiet"])
        self.run("knn", [sys.executable, "-m", "datagen", "knn", "--src", str(swap), "--out", str(out),
                         "--k", "3", "--arch", "demo-vit-64", "--pretrained", str(self.base),
                         "--method", "exact"])

    def finetunes(self) -> list[tuple[str, list[str]]]:
        """The finetunes still to run, costliest first (so the last one does not run alone)."""
        return [(r, self.train_cmd(r)) for r in LONGEST_FIRST if r in self.args.recipes and not self.done(r)]


def wait(procs: list[tuple[str, subprocess.Popen, Seed]]) -> None:
    """Wait for every process; a failure stops the demo naming the step and its log."""
    for name, proc, seed in procs:
        if proc.wait() != 0:
            tail = (seed.logs / f"{name}.log").read_text().strip().splitlines()[-3:]
            raise SystemExit(f"demo: step '{name}' (seed {seed.seed}) failed with exit code {proc.returncode}; "
                             f"log {seed.logs / (name + '.log')}:\n  " + "\n  ".join(tail))
        if name in FINETUNES or name == "demo_pretrain":
            (seed.runs / name / "DONE").write_text("")


def epochs_done(seed: Seed, recipe: str) -> int:
    path = seed.runs / recipe / "eval.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def run_parallel(jobs: list[tuple[Seed, str, list[str]]], slots: int) -> None:
    """Run the finetunes `slots` at a time (one thread each), reporting each finished epoch."""
    pending, running, shown = list(jobs), [], {}
    while pending or running:
        while pending and len(running) < slots:
            seed, recipe, cmd = pending.pop(0)
            log(f"seed {seed.seed}: {recipe} started")
            running.append((seed, recipe, seed.command(recipe, cmd, threads=1)))
        time.sleep(2)
        for seed, recipe, proc in list(running):
            n = epochs_done(seed, recipe)
            if n != shown.get((seed.seed, recipe), 0):
                shown[(seed.seed, recipe)] = n
                m = last_metrics(seed, recipe)
                log(f"seed {seed.seed}: {recipe} epoch {n}: SugarCrepe macro {m.get('sugarcrepe/macro', 0):.3f}, "
                    f"BiVLC group {m.get('bivlc/group', 0):.3f}")
            if proc.poll() is not None:
                running.remove((seed, recipe, proc))
                wait([(recipe, proc, seed)])
                log(f"seed {seed.seed}: {recipe} finished")


def eval_lines(seed: Seed, recipe: str) -> list[dict]:
    path = seed.runs / recipe / "eval.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def last_metrics(seed: Seed, recipe: str) -> dict[str, float]:
    lines = eval_lines(seed, recipe)
    return lines[-1]["metrics"] if lines else {}


# --- results ------------------------------------------------------------------------------------
def summarise(seeds: list[Seed], finetunes: tuple[str, ...] = FINETUNES) -> dict:
    """Last-epoch metrics per recipe: per seed, mean, sample standard deviation, delta to control."""
    recipes = ("demo_pretrain",) + finetunes
    return summarise_metrics({r: {s.seed: last_metrics(s, r) for s in seeds} for r in recipes})


def summarise_metrics(per_seed: dict[str, dict[int, dict[str, float]]]) -> dict:
    """`{recipe: {seed: {metric: value}}}` (the control, `demo_clip_ft`, among the recipes) ->
    per recipe and metric: the values, their mean and sample std, and the mean and std of the
    per-seed difference to the control. A metric a run did not report is left out (mean None)."""
    seeds = list(per_seed["demo_clip_ft"])
    summary: dict = {"seeds": seeds, "metrics": [m for m, _ in METRICS], "recipes": {}}
    for r, by_seed in per_seed.items():
        rows = {}
        for metric, _ in METRICS:
            values = [by_seed[s][metric] for s in seeds if metric in by_seed[s]]
            control = [per_seed["demo_clip_ft"][s].get(metric) for s in seeds]
            deltas = [v - c for v, c in zip(values, control) if c is not None]
            rows[metric] = {"values": values, "mean": statistics.fmean(values) if values else None,
                            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                            "delta_mean": statistics.fmean(deltas) if deltas else None,
                            "delta_std": statistics.stdev(deltas) if len(deltas) > 1 else 0.0}
        summary["recipes"][r] = rows
    return summary


def markdown(summary: dict, command: str, minutes: float) -> str:
    seeds = summary["seeds"]
    spread = "mean ± sample std over seeds " if len(seeds) > 1 else "one seed "
    return "\n".join([f"# Offline demo results", "", f"Command: `{command}`; seeds {seeds}; "
                      f"{minutes:.1f} min wall. Accuracies in %, last epoch, {spread}{seeds}.", "",
                      tables(summary)])


def tables(summary: dict) -> str:
    """The accuracy table (mean ± std per recipe) and the difference-to-control table, markdown."""
    seeds = summary["seeds"]
    lines = ["| recipe | " + " | ".join(short for _, short in METRICS) + " |",
             "|---|" + "---|" * len(METRICS)]
    for r, rows in summary["recipes"].items():
        cells = []
        for metric, _ in METRICS:
            row = rows[metric]
            if row["mean"] is None:
                cells.append("–")
                continue
            cells.append(f"{100 * row['mean']:.1f}" + (f" ± {100 * row['std']:.1f}" if len(seeds) > 1 else ""))
        label = "base (no finetuning)" if r == "demo_pretrain" else LABELS[r]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Difference to the control, percentage points (mean ± std of the per-seed difference):", "",
              "| recipe | " + " | ".join(short for _, short in METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for r in [r for r in summary["recipes"] if r not in ("demo_pretrain", "demo_clip_ft")]:
        rows = summary["recipes"][r]
        cells = [f"{100 * rows[m]['delta_mean']:+.1f}" + (f" ± {100 * rows[m]['delta_std']:.1f}" if len(seeds) > 1 else "")
                 if rows[m]["delta_mean"] is not None else "–" for m, _ in METRICS]
        lines.append(f"| {LABELS[r]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plots(summary: dict, seeds: list[Seed], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(14, 4.5))
    finetunes = [r for r in summary["recipes"] if r != "demo_pretrain"]
    width = 0.8 / len(finetunes)
    x = np.arange(len(METRICS))
    for i, r in enumerate(finetunes):
        rows = summary["recipes"][r]
        means = [100 * (rows[m]["mean"] or 0) for m, _ in METRICS]
        stds = [100 * rows[m]["std"] for m, _ in METRICS]
        ax.bar(x + i * width, means, width, yerr=stds, label=LABELS[r], capsize=2)
    ax.set_xticks(x + width * (len(finetunes) - 1) / 2, [s for _, s in METRICS], rotation=30, ha="right")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"Offline demo, last epoch, seeds {summary['seeds']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "comparison.png", dpi=120)
    plt.close(fig)
    curves = [("sugarcrepe/swap", "SugarCrepe swap"), ("sugarcrepe/replace_rel", "SugarCrepe replace-rel"),
              ("bivlc/t2i", "BiVLC T2I"), ("bivlc/group", "BiVLC group")]
    fig, axes = plt.subplots(1, len(curves), figsize=(16, 3.8))
    for ax, (metric, title) in zip(axes, curves):
        for r in finetunes:
            per_epoch = [[ln["metrics"][metric] for ln in eval_lines(s, r)] for s in seeds]
            n = min(len(v) for v in per_epoch)
            if n:
                ax.plot(range(1, n + 1), [100 * statistics.fmean(v[e] for v in per_epoch) for e in range(n)],
                        marker="o", label=LABELS[r])
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("accuracy (%), mean over seeds")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="launch/demo.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--slots", type=int, default=2, help="finetunes run at a time (default 2)")
    parser.add_argument("--samples", type=int, default=0, help="override data.samples_per_epoch")
    parser.add_argument("--epochs", type=int, default=0, help="override schedule.epochs")
    parser.add_argument("--bench-scale", type=float, default=1.0, help="benchmark sizes (world build)")
    parser.add_argument("--recipes", nargs="+", choices=FINETUNES, default=list(FINETUNES),
                        help="finetunes to run (default all four; the control is always run)")
    args = parser.parse_args(argv)
    args.recipes = [r for r in FINETUNES if r in args.recipes or r == "demo_clip_ft"]
    out = (ROOT / args.out) if not Path(args.out).is_absolute() else Path(args.out)
    sys.path.insert(0, str(ROOT))
    t0 = time.time()
    seeds = [Seed(out, s, args) for s in args.seeds]
    for seed in seeds:
        seed.build_world()
        seed.pretrain()
        seed.negclip_data()
        run_parallel([(seed, r, cmd) for r, cmd in seed.finetunes()], args.slots)
    summary = summarise(seeds, tuple(args.recipes))
    minutes = (time.time() - t0) / 60
    command = "bash launch/demo.sh " + " ".join(argv if argv is not None else sys.argv[1:])
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    text = markdown(summary, command.strip(), minutes)
    (out / "results.md").write_text(text)
    plots(summary, seeds, out)
    print(text)
    log(f"done in {minutes:.1f} min: {out / 'results.md'}, comparison.png, curves.png; "
        f"TensorBoard: tensorboard --logdir {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
