"""The offline demo: synthetic world -> a shared base model -> five finetuning recipes -> comparison.

    bash launch/demo.sh                          # one seed (the README's main command)
    bash launch/demo.sh --seeds 0 1 2            # several seeds: means and spread (docs/demo.md)
    bash launch/demo.sh --base plain             # a base without left/right signal

For each seed, everything under `<out>/seed-<s>/`:
1. `world/`: the synthetic world (`python -m datagen world build --negatives --partners all`):
   training shards with scene-edit negatives (swap / replace / add on objects, attributes,
   relations), a copy with generated partner images, a set of left/right scenes with their
   mirrored partners (`train_mirrored`), and every benchmark set.
2. `pretrained.pt`: the base model, the stand-in for the pretrained CLIP weights the papers
   start from, with the weak left/right signal CLIP carries (docs/demo.md, "The left-right
   setting"). Two more worlds of the seed state every training caption's left/right relation in
   one argument order: `lock_world/`, scenes of six bindings (`LOCK_WORLD`), and
   `layout_world/`, the 30 trainable bindings in 15 fixed couples, each mirrored partner's
   caption drawing its order (`LAYOUT_WORLD`). The base trains from random weights first
   `recipes/demo_pretrain_locked.yaml` on `lock_world/` (the text tower locked, 960 steps), then
   `recipes/demo_pretrain.yaml` on `layout_world/` for one epoch from its last checkpoint (320
   steps); `demo_leftright` takes its pairs from `layout_world/train_mirrored`. Every other step
   uses `world/`. `--base plain`: `recipes/demo_pretrain.yaml` alone on `world/` (plain CLIP
   training; that base measured no left/right signal) and the pairs from `world/train_mirrored`.
3. `world/train_negclip/`: NegCLIP's data, NegCLIP's own swap negatives (`python -m datagen
   negatives generate --rules negclip --mode all --cap 64 --require-negative`: every swap its
   authors' script can make, captions without one left out as the script did) and the K=3
   nearest-neighbour images under the base model (`python -m datagen knn`).
4. `start/<recipe>.json`: the base model's in-batch numbers (`val/*`: loss, i2t / t2i,
   hard-negative and partner accuracy) on each finetune's validation batches (5% of the images,
   held out by image id), the "epoch 0" of the finetunes' `val/*` curves.
5. `runs/<recipe>/`: `demo_clip_ft` (control), `demo_negclip`, `demo_trohn_text`,
   `demo_trohn_img`, `demo_leftright`, each finetuned from `pretrained.pt` for the same number of
   anchors and evaluated on VISLA, SugarCrepe, BiVLC, ARO and `left_right` at every epoch, with
   its validation batches (TensorBoard + `eval.jsonl`). Two trainers run at a time, one thread
   each (both cores busy).
Then `<out>/results.md` and `results.json` (last-epoch metrics per recipe, mean and standard
deviation over seeds, differences to the control; from the per-item values the trainer keeps of
each run's last evaluation, the first seed's 95 % intervals and each finetune against the
control pooled over the seeds, `demo_report.item_statistics`) and `comparison.png` / `curves.png`. Every
step is a command a user could type; each one's output goes to `<out>/seed-<s>/logs/`. A step
whose output is complete is not run again and a killed training resumes from its last
checkpoint (`checkpoint.resume=auto`), so a rerun after a kill continues. While a step runs, the
last progress line of its log (steps, rate, ETA) is repeated on stderr every `--progress-every`
seconds, with a line on the whole demo (`Overall`: the step, "finetune 3 of 5", elapsed time and
an ETA for the whole demo). Each step's wall time is kept in `<out>/seed-<s>/wall_time.json`; a
step a rerun skips keeps its recorded time, and `results.md` states the recorded total. Before
the finetunes start, each one's TensorBoard log gets the base model's numbers at step 0
(`write_start_scalars`), the epoch-0 points of `curves.png`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from demo_report import last_metrics, markdown, plots, start_scalars, summarise

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ARCH = "demo-vit-64"  # what recipes/demo_*.yaml name
FINETUNES = ("demo_clip_ft", "demo_negclip", "demo_trohn_text", "demo_trohn_img", "demo_leftright")
# costliest first: 2B x 4B, 2B x 2B, B x 2B, (B + B/8) x (B + B/8), B x B
LONGEST_FIRST = ("demo_negclip", "demo_trohn_img", "demo_trohn_text", "demo_leftright", "demo_clip_ft")
# expected wall seconds of each step with nothing else running (bench/results/demo_wall_time.md,
# the 3-seed runs of 2026-11-27 at 76af771 and its child: world 20-31 s, base model 3.4-3.7 min,
# NegCLIP data 24-29 s, start numbers 11-14 s, the five finetunes 10.7-11.4 min, two at a time);
# the overall ETA scales them by this run's speed so far
EXPECTED_S = {"world": 25.0, "layout world": 36.0, "base model": 215.0, "NegCLIP data": 28.0,
              "start numbers": 12.0}
# one finetune's seconds on one thread (two run at a time; `--base layout`, seeds 1 and 2)
FINETUNE_S = {"demo_negclip": 360.0, "demo_trohn_img": 300.0, "demo_trohn_text": 200.0,
              "demo_leftright": 185.0, "demo_clip_ft": 155.0}
# `--base layout`: the options of `layout_world/`, the world of the base's second stage and of the
# pairs (docs/demo_leftright.md, experiments (11), (13), (17) and (23)); `--leftright-fraction`
# given replaces the fraction here and in `LOCK_WORLD`
LAYOUT_WORLD = ["--object-couples", "--fixed-order", "--mirrored-order", "drawn", "--leftright-fraction", "1"]
# `--base layout`: the options of `lock_world/`, the world of the base's first stage: six
# bindings, where the locked stage finds the left/right signal in every seed measured
# (docs/demo_leftright.md (28), (29))
LOCK_WORLD = ["--object-pool", "6", "--fixed-order", "--mirrored-order", "drawn", "--leftright-fraction", "1"]
LOCKED = "demo_pretrain_locked"  # `--base layout`: the base's first stage
# `--base layout`: the expected seconds of the two layout worlds and of the base model
# (bench/results/demo_wall_time.md, 2026-11-27), and the share of that step each of its two runs'
# bars stands for (960 + 320 steps)
LAYOUT_BASE_S = 285.0
LAYOUT_STAGES = {LOCKED: (0.0, 3 / 4), "demo_pretrain": (3 / 4, 1.0)}
# the training sets of each recipe; with `--base layout` the base's sets and `train_mirrored` come
# from `lock_world/` and `layout_world/` (`Seed.shards`)
TRAIN_SET = {"demo_pretrain": ["train"], LOCKED: ["train"], "demo_clip_ft": ["train"], "demo_negclip": ["train_negclip"],
             "demo_trohn_text": ["train"], "demo_trohn_img": ["train_generated"],
             "demo_leftright": ["train", "train_mirrored"]}
# the base model's validation numbers of a finetune recipe: no benchmarks (so no selection), no logs
START_OVERRIDES = ("eval.benchmarks=[]", "checkpoint.best_metric=null", "logging.tensorboard=false",
                   "logging.progress=false", "checkpoint.resume=null")

def log(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


PROGRESS = re.compile(r"\b\d+/\d+\b")  # "32/320 [..." (tqdm), "4000/4000 samples (472/s)"


def last_progress(path: Path) -> str:
    """The newest progress line of a step's log (a tqdm bar: steps, rate, ETA), or ''."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - 4096))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    for line in reversed(re.split(r"[\r\n]+", tail)):
        line = line.strip()
        if line and PROGRESS.search(line):
            return re.sub(r"\s+", " ", line)[:160]
    return ""


BAR = re.compile(r"(?:epoch (\d+)/(\d+)\S*\s.*?)?\b(\d+)/(\d+)\b")


def bar_fraction(line: str) -> float | None:
    """How far a step is, from its progress line: `epoch 2/4: ... 40/80` -> 0.375 (epochs counted
    from 1, as the trainer's bars count them), `32/320` -> 0.1; None without a count."""
    match = BAR.search(line)
    if not match or not int(match.group(4)):
        return None
    within = min(1.0, int(match.group(3)) / int(match.group(4)))
    if match.group(1) and int(match.group(2)):
        return min(1.0, (int(match.group(1)) - 1 + within) / int(match.group(2)))
    return within


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


class Overall:
    """Progress of the whole demo: every step of every seed with its expected seconds
    (`EXPECTED_S`, `FINETUNE_S`); steps already done are left out. The ETA is the expected
    seconds still to run times this run's speed so far (elapsed / expected seconds done in this
    run: a step that resumes an earlier run's work counts from its first progress line)."""

    def __init__(self, seeds: list["Seed"], slots: int = 2, clock=time.time):
        self.clock, self.t0 = clock, clock()
        # (seed, step) -> [expected s, fraction done, fraction done when this run began it (None:
        # not known yet, the step resumes earlier work)]
        self.units: dict[tuple[int, str], list] = {}
        for seed in seeds:
            seed.overall = self
            for step, done in seed.step_status():
                if not done:
                    expected = FINETUNE_S[step] / max(1, slots) if step in FINETUNE_S else EXPECTED_S[step]
                    if step == "base model" and seed.args.base == "layout":
                        expected = LAYOUT_BASE_S
                    self.units[(seed.seed, step)] = [expected, 0.0, None if seed.resumes(step) else 0.0]
        self.seeds = len(seeds)

    def progress(self, seed: int, step: str, fraction: float) -> None:
        if (unit := self.units.get((seed, step))) is not None:
            unit[1] = max(0.0, min(1.0, fraction))
            if unit[2] is None:
                unit[2] = unit[1]

    def eta(self) -> float:
        """Seconds left for the whole demo."""
        done = sum(e * (f - (f if s is None else s)) for e, f, s in self.units.values())
        left = sum(e * (1 - f) for e, f, _ in self.units.values())
        elapsed = self.clock() - self.t0
        return left * (elapsed / done if done > 0 else 1.0)

    def line(self, seed: "Seed", where: str) -> str:
        """`overall: seed 0 (1 of 1), finetune 3 of 5 (demo_trohn_text); elapsed 4.2 min, ETA 7.9 min
        for the whole demo`."""
        return (f"overall: seed {seed.seed} ({seed.index + 1} of {self.seeds}), {where}; elapsed "
                f"{minutes(self.clock() - self.t0)}, ETA {minutes(self.eta())} for the whole demo")


class Seed:
    """The paths and steps of one seed's demo."""

    def __init__(self, out: Path, seed: int, args: argparse.Namespace, index: int = 0):
        self.seed, self.args, self.index = seed, args, index
        self.dir = out / f"seed-{seed}"
        self.world, self.runs, self.logs = self.dir / "world", self.dir / "runs", self.dir / "logs"
        self.layout_world = self.dir / "layout_world"  # `--base layout` only
        self.lock_world = self.dir / "lock_world"  # `--base layout` only
        self.base = self.dir / "pretrained.pt"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.overall: Overall | None = None
        self.where = ""  # the step now running, for the overall line

    # --- overall progress and wall times -----------------------------------------------------
    def step_status(self) -> list[tuple[str, bool]]:
        """(step, already done) for every step of this seed, in order."""
        steps = [("world", (self.world / "world.json").is_file())]
        if self.args.base == "layout":
            steps.append(("layout world", (self.layout_world / "world.json").is_file()
                          and (self.lock_world / "world.json").is_file()))
        steps.append(("base model", self.base.is_file()))
        if "demo_negclip" in self.args.recipes:
            steps.append(("NegCLIP data", self.negclip_data_done()))
        steps.append(("start numbers", not self.start_todo()))
        return steps + [(r, self.done(r)) for r in LONGEST_FIRST if r in self.args.recipes]

    def resumes(self, step: str) -> bool:
        """Whether `step` (a training step) starts from checkpoints an earlier run left."""
        if step == "base model":
            recipes = [LOCKED, "demo_pretrain"] if self.args.base == "layout" else ["demo_pretrain"]
        else:
            recipes = [step] if step in FINETUNES else []
        return any(any((self.runs / r / "checkpoints").glob("*")) for r in recipes
                   if (self.runs / r / "checkpoints").is_dir())

    def say(self, where: str) -> None:
        """The step now starting, with the overall line."""
        self.where = where
        if self.overall is not None:
            log(self.overall.line(self, where))

    def show_progress(self, step: str, line: str, name: str = "") -> None:
        if self.overall is not None:
            if (fraction := bar_fraction(line)) is not None:
                if step == "base model" and self.args.base == "layout":  # two runs, one step
                    low, high = LAYOUT_STAGES[name]
                    fraction = low + (high - low) * fraction
                self.overall.progress(self.seed, step, fraction)
            log(self.overall.line(self, self.where))

    def finished(self, step: str) -> None:
        if self.overall is not None:
            self.overall.progress(self.seed, step, 1.0)

    def wall_times(self) -> dict[str, float]:
        """Recorded wall seconds per step (`wall_time.json`): what a skipped step took when it ran."""
        path = self.dir / "wall_time.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def record_time(self, step: str, seconds: float) -> None:
        """Add `seconds` to the step's recorded wall time (a step run in parts adds each part)."""
        times = self.wall_times()
        times[step] = times.get(step, 0.0) + seconds
        tmp = self.dir / "wall_time.json.tmp"
        tmp.write_text(json.dumps(times, indent=1))
        os.replace(tmp, self.dir / "wall_time.json")

    def timed(self, step: str, fn) -> bool:
        """Run one step (`fn()` returns whether it ran); a step that ran adds its wall time, a
        skipped one keeps what was recorded."""
        t = time.time()
        ran = bool(fn())
        if ran:
            self.record_time(step, time.time() - t)
        return ran

    def command(self, name: str, cmd: list[str], threads: int) -> subprocess.Popen:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        handle = open(self.logs / f"{name}.log", "w")
        handle.write("$ " + " ".join(cmd) + "\n")
        handle.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
        handle.close()  # the child holds its own copy of the descriptor
        return proc

    def run(self, name: str, cmd: list[str], threads: int = 2, step: str = "") -> None:
        proc = self.command(name, cmd, threads)
        shown = time.time()
        while proc.poll() is None:
            time.sleep(1)
            if time.time() - shown >= self.args.progress_every:
                shown = time.time()
                if line := last_progress(self.logs / f"{name}.log"):
                    log(f"seed {self.seed}: {name}: {line}")
                    self.show_progress(step, line, name)
        wait([(name, proc, self)])

    def train_cmd(self, recipe: str) -> list[str]:
        a = self.args
        shards = ",".join(str(path) for path in self.shards(recipe))
        cmd = [sys.executable, "trainer/train.py", f"recipes/{recipe}.yaml", f"seed={self.seed}",
               f"logging.output_dir={self.runs}", "checkpoint.resume=auto",
               f"data.train_shards=[{shards}]",
               f"eval.data_root={self.world / 'benchmarks'}"]
        if recipe not in ("demo_pretrain", LOCKED):
            cmd.append(f"model.pretrained={self.base}")
        if a.arch != DEFAULT_ARCH:
            cmd.append(f"model.arch={a.arch}")
        if a.samples:
            cmd.append(f"data.samples_per_epoch={a.samples}")
        if a.epochs:
            cmd.append(f"schedule.epochs={a.epochs}")
        if recipe == "demo_pretrain" and a.base == "layout":  # the second stage: one epoch from the first
            from compclip.models.checkpoint import latest_checkpoint
            first = latest_checkpoint(self.runs / LOCKED / "checkpoints")
            cmd += ["schedule.epochs=1", f"model.pretrained={first}"]
        return cmd

    def shards(self, recipe: str) -> list[Path]:
        """The recipe's training sets: `world/`'s, but with `--base layout` the base's first stage
        trains on `lock_world/` and its second stage and the pairs' `train_mirrored` on
        `layout_world/`."""
        if self.args.base == "layout" and recipe == LOCKED:
            return [self.lock_world / name for name in TRAIN_SET[recipe]]
        layout = self.args.base == "layout"
        return [self.layout_world / name if layout and (recipe == "demo_pretrain" or name == "train_mirrored")
                else self.world / name for name in TRAIN_SET[recipe]]

    def done(self, recipe: str) -> bool:
        return (self.runs / recipe / "DONE").is_file()

    # --- steps --------------------------------------------------------------------------------
    def build_world(self) -> bool:
        if (self.world / "world.json").is_file():
            return False
        log(f"seed {self.seed}: building the synthetic world")
        self.say("world")
        self.run("world", self.world_cmd(), step="world")
        self.finished("world")
        return True

    def build_layout_world(self) -> bool:
        """`--base layout`: the base's two worlds, `lock_world/` (`LOCK_WORLD`) and `layout_world/`
        (`LAYOUT_WORLD`)."""
        todo = [kind for kind, path in (("lock", self.lock_world), ("layout", self.layout_world))
                if self.args.base == "layout" and not (path / "world.json").is_file()]
        if not todo:
            return False
        log(f"seed {self.seed}: building the layout worlds (the base's scenes and the pairs)")
        self.say("layout world")
        for kind in todo:
            self.run(f"{kind}_world", self.world_cmd(kind), step="layout world")
        self.finished("layout world")
        return True

    def world_cmd(self, kind: str = "world") -> list[str]:
        """`world build` of `world/`, or of `layout_world/` or `lock_world/` (`kind` "layout",
        "lock"); `--leftright-fraction` goes to the base's worlds (appended last: it wins)."""
        a = self.args
        out = {"world": self.world, "layout": self.layout_world, "lock": self.lock_world}[kind]
        cmd = [sys.executable, "-m", "compclip.datagen", "world", "build", "--out", str(out),
               "--seed", str(self.seed), "--negatives", "--partners", "all",
               "--bench-scale", str(a.bench_scale), "--size", str(a.size)]
        cmd += {"world": [], "layout": LAYOUT_WORLD, "lock": LOCK_WORLD}[kind]
        if a.leftright_fraction is not None and (kind != "world") == (a.base == "layout"):
            cmd += ["--leftright-fraction", str(a.leftright_fraction)]
        return cmd

    def pretrain(self) -> bool:
        if self.base.is_file():
            return False
        log(f"seed {self.seed}: training the base model (stand-in for pretrained CLIP weights)")
        self.say("base model")
        if self.args.base == "layout" and not self.done(LOCKED):
            self.run(LOCKED, self.train_cmd(LOCKED), step="base model")
        self.run("demo_pretrain", self.train_cmd("demo_pretrain"), step="base model")
        from compclip.models.checkpoint import latest_checkpoint, sidecar_path
        last = latest_checkpoint(self.runs / "demo_pretrain" / "checkpoints")
        shutil.copyfile(sidecar_path(last), sidecar_path(self.base))
        shutil.copyfile(last, self.base.with_suffix(".tmp"))
        os.replace(self.base.with_suffix(".tmp"), self.base)
        self.finished("base model")
        return True

    def negclip_data_done(self) -> bool:
        out = self.world / "train_negclip"
        return (out / "manifest.json").is_file() and bool(json.loads((out / "manifest.json").read_text()).get("complete"))

    def negclip_data(self) -> bool:
        swap, out = self.world / "train_swap", self.world / "train_negclip"
        if "demo_negclip" not in self.args.recipes or self.negclip_data_done():
            return False
        log(f"seed {self.seed}: NegCLIP data: NegCLIP's swap negatives, then K=3 neighbours under the base model")
        self.say("NegCLIP data")
        self.run("negatives_swap", [sys.executable, "-m", "compclip.datagen", "negatives", "generate",
                                    "--src", str(self.world / "train"), "--out", str(swap),
                                    "--rules", "negclip", "--mode", "all", "--cap", "64",
                                    "--require-negative", "--seed", str(self.seed)])
        self.run("knn", [sys.executable, "-m", "compclip.datagen", "knn", "--src", str(swap), "--out", str(out),
                         "--k", "3", "--arch", self.args.arch, "--pretrained", str(self.base),
                         "--method", "exact"])
        self.finished("NegCLIP data")
        return True

    def start_todo(self) -> list[str]:
        return [r for r in self.args.recipes if not (self.dir / "start" / f"{r}.json").is_file()]

    def start_metrics(self) -> bool:
        """The base model's `val/*` numbers on each finetune's validation batches (its epoch 0)."""
        todo = self.start_todo()
        if not todo:
            return False
        log(f"seed {self.seed}: the base model's in-batch numbers on the finetunes' validation batches")
        self.say("start numbers")
        cmd = [sys.executable, "launch/demo.py", "start-metrics", str(self.dir / "start")]
        for recipe in todo:
            cmd += ["--", *self.train_cmd(recipe)[2:], *START_OVERRIDES, f"logging.output_dir={self.dir / 'start'}"]
        self.run("start_metrics", cmd, step="start numbers")
        self.finished("start numbers")
        return True

    def finetunes(self) -> list[tuple[str, list[str]]]:
        """The finetunes still to run, costliest first (so the last one does not run alone)."""
        return [(r, self.train_cmd(r)) for r in LONGEST_FIRST if r in self.args.recipes and not self.done(r)]


def run_seed(seed: Seed, slots: int) -> None:
    """Every step of one seed, each timed (`Seed.timed`: a skipped step keeps its recorded time);
    each finetune's TensorBoard log gets the base model's numbers at step 0 before it starts."""
    t = time.time()
    seed.timed("world", seed.build_world)
    seed.timed("layout world", seed.build_layout_world)
    seed.timed("base model", seed.pretrain)
    seed.timed("NegCLIP data", seed.negclip_data)
    seed.timed("start numbers", seed.start_metrics)
    for recipe in seed.args.recipes:
        write_start_scalars(seed, recipe)
    jobs = [(seed, r, cmd) for r, cmd in seed.finetunes()]
    seed.timed("finetunes", lambda: run_parallel(jobs, slots) or bool(jobs))
    log(f"seed {seed.seed}: done; this run {minutes(time.time() - t)}, recorded wall time of its steps "
        f"{minutes(sum(seed.wall_times().values()))} (load average {os.getloadavg()[0]:.2f})")


def total_minutes(seeds: list[Seed]) -> float:
    """The demo's wall time: the recorded seconds of every step of every seed, in minutes."""
    return sum(sum(s.wall_times().values()) for s in seeds) / 60


def write_start_scalars(seed: Seed, recipe: str) -> bool:
    """`start_scalars` at step 0 in the finetune's TensorBoard folder (an event file of its own,
    `*.epoch0`, written once), so TensorBoard shows the epoch-0 points `curves.png` plots."""
    folder = seed.runs / recipe / "tensorboard"
    values = start_scalars(seed, recipe)
    if not values or (folder.is_dir() and any(folder.glob("*.epoch0"))):
        return False
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(str(folder), filename_suffix=".epoch0")
    for tag, value in sorted(values.items()):
        writer.add_scalar(tag, value, 0)
    writer.close()
    return True


def wait(procs: list[tuple[str, subprocess.Popen, Seed]]) -> None:
    """Wait for every process; a failure stops the demo naming the step and its log."""
    for name, proc, seed in procs:
        if proc.wait() != 0:
            tail = (seed.logs / f"{name}.log").read_text().strip().splitlines()[-3:]
            raise SystemExit(f"demo: step '{name}' (seed {seed.seed}) failed with exit code {proc.returncode}; "
                             f"log {seed.logs / (name + '.log')}:\n  " + "\n  ".join(tail))
        if name in FINETUNES or name in ("demo_pretrain", LOCKED):
            (seed.runs / name / "DONE").write_text("")


def epochs_done(seed: Seed, recipe: str) -> int:
    path = seed.runs / recipe / "eval.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def run_parallel(jobs: list[tuple[Seed, str, list[str]]], slots: int) -> None:
    """Run the finetunes `slots` at a time (one thread each), reporting each finished epoch."""
    pending, running, shown, last_shown = list(jobs), [], {}, time.time()
    every = jobs[0][0].args.progress_every if jobs else 30
    while pending or running:
        while pending and len(running) < slots:
            seed, recipe, cmd = pending.pop(0)
            log(f"seed {seed.seed}: {recipe} started")
            ordinal = [r for r in LONGEST_FIRST if r in seed.args.recipes]
            seed.say(f"finetune {ordinal.index(recipe) + 1} of {len(ordinal)} ({recipe})")
            running.append((seed, recipe, seed.command(recipe, cmd, threads=1)))
        time.sleep(2)
        if running and time.time() - last_shown >= every:
            last_shown = time.time()
            for seed, recipe, _ in running:
                if line := last_progress(seed.logs / f"{recipe}.log"):
                    log(f"seed {seed.seed}: {recipe}: {line}")  # the bar names its epoch: `epoch 2/3`
                    if seed.overall is not None and (fraction := bar_fraction(line)) is not None:
                        seed.overall.progress(seed.seed, recipe, fraction)
            seed = running[0][0]
            if seed.overall is not None:
                log(seed.overall.line(seed, seed.where))
        for seed, recipe, proc in list(running):
            n = epochs_done(seed, recipe)
            if n != shown.get((seed.seed, recipe), 0):
                shown[(seed.seed, recipe)] = n
                m = last_metrics(seed, recipe)
                log(f"seed {seed.seed}: {recipe} epoch {n}: SugarCrepe macro {m.get('sugarcrepe/macro', 0):.3f}, "
                    f"BiVLC group {m.get('bivlc/group', 0):.3f}, left/right {m.get('left_right/acc', 0):.3f}")
            if proc.poll() is not None:
                running.remove((seed, recipe, proc))
                wait([(recipe, proc, seed)])
                seed.finished(recipe)
                log(f"seed {seed.seed}: {recipe} finished")


def start_metrics_main(argv: list[str]) -> int:
    """`launch/demo.py start-metrics DIR -- RECIPE [key=value ...] [-- RECIPE ...]`: for each recipe,
    the `val/*` numbers of its model before any training step (its validation batches, no
    benchmarks), written to DIR/<recipe name>.json."""
    groups, current = [], None
    for arg in argv[1:]:
        if arg == "--":
            current = []
            groups.append(current)
        elif current is not None:
            current.append(arg)
    if not argv or not groups or not all(groups):
        print("usage: launch/demo.py start-metrics DIR -- RECIPE [key=value ...] [-- RECIPE ...]", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from compclip.trainer.recipe import load_recipe
    from compclip.trainer.train import Trainer, preflight
    for group in groups:
        recipe = load_recipe(group[0], group[1:])
        if not recipe.data.val_fraction and not recipe.data.val_shards:
            print(f"error: {group[0]}: no validation batches (set data.val_fraction or data.val_shards)",
                  file=sys.stderr)
            return 2
        sources, val_sources, overlap = preflight(recipe)
        metrics = Trainer(recipe, sources, val_sources, overlap).validate()
        out = Path(argv[0]) / f"{recipe.name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".tmp").write_text(json.dumps(metrics, indent=1))
        os.replace(out.with_suffix(".tmp"), out)
        print(f"{recipe.name}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items())),
              file=sys.stderr, flush=True)
    return 0


def check_model_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`--arch` and the world build's options (`--size`, `--bench-scale`, `--leftright-fraction`:
    the world CLI's own `check_options`) are checked before the world is built (one line, exit 2)."""
    from compclip.cli import InputError
    from compclip.datagen.world.cli import DEFAULT_TRAIN_SIZE, check_options
    from compclip.models.load import resolve_model
    try:
        check_options(DEFAULT_TRAIN_SIZE, args.size, "all", args.bench_scale, 1000, args.leftright_fraction)
    except InputError as err:
        parser.error(str(err))
    try:
        resolve_model(args.arch, None)
    except InputError as err:
        parser.error(f"--arch: {err}")


def build_parser():
    """The demo's command line (`launch/demo.sh [options]`)."""
    from compclip.cli import make_parser
    parser = make_parser("launch/demo.sh", __doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/demo", help="output folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds, space-separated")
    parser.add_argument("--slots", type=int, default=2, help="finetunes run at a time")
    parser.add_argument("--samples", type=int, default=0, help="override data.samples_per_epoch")
    parser.add_argument("--epochs", type=int, default=0, help="override schedule.epochs")
    parser.add_argument("--bench-scale", type=float, default=1.0, help="benchmark sizes (world build)")
    parser.add_argument("--arch", default=DEFAULT_ARCH,
                        help="model architecture of every step (models/configs/; demo-vit-96-wide: the "
                             "larger-architecture run of docs/demo.md, with --size 96)")
    parser.add_argument("--size", type=int, default=64,
                        help="image side of the world in pixels (the architecture's image size)")
    parser.add_argument("--base", choices=("plain", "layout"), default="layout",
                        help="layout (default): a base with a weak left/right signal, trained with "
                             "its text tower locked on a six-binding world whose captions state "
                             "their left/right relation in one order, then one epoch on a world "
                             "of fixed object couples whose mirrored scenes are the pairs' "
                             "(docs/demo.md, the left-right setting); plain: one stage of plain "
                             "CLIP training on the world's own caption mix")
    parser.add_argument("--leftright-fraction", type=float, default=None, metavar="F",
                        help="share of the base model's world's training captions that state a "
                             "left/right relation (world build); default: the world's own mix "
                             "(--base plain), 1 (--base layout, its layout world)")
    parser.add_argument("--recipes", nargs="+", choices=FINETUNES, default=list(FINETUNES),
                        help="finetunes to run (the control is always run)")
    parser.add_argument("--progress-every", type=float, default=30.0,
                        help="seconds between progress lines of a running step on stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["start-metrics"]:
        return start_metrics_main(argv[1:])
    sys.path.insert(0, str(ROOT))  # this checkout first
    parser = build_parser()
    args = parser.parse_args(argv)
    args.recipes = [r for r in FINETUNES if r in args.recipes or r == "demo_clip_ft"]
    out = (ROOT / args.out) if not Path(args.out).is_absolute() else Path(args.out)
    check_model_options(parser, args)
    t0 = time.time()
    seeds = [Seed(out, s, args, i) for i, s in enumerate(args.seeds)]
    Overall(seeds, args.slots)
    for seed in seeds:
        run_seed(seed, args.slots)
    summary = summarise(seeds, tuple(args.recipes))
    wall = total_minutes(seeds)
    log(f"this run: {minutes(time.time() - t0)}; recorded wall time of every step: {wall:.1f} min")
    command = "bash launch/demo.sh " + " ".join(argv)
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    text = markdown(summary, command.strip(), wall)
    (out / "results.md").write_text(text)
    plots(summary, seeds, out)
    print(text)
    log(f"done: {out / 'results.md'}, comparison.png, curves.png; "
        f"TensorBoard: {Path(sys.executable).parent / 'tensorboard'} --logdir {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
