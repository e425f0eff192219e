"""The demo's base model per share of left/right captions in its pretraining data (issue 38).

    .venv/bin/python bench/bench_leftright_base.py --fractions default 0 0.002 0.02 0.1 1

For each fraction (`default`: the world's own mix, as `bash launch/demo.sh` builds it), one seed:
build the world with `--leftright-fraction F --partners mirrored`, train the base model
(`recipes/demo_pretrain.yaml`, as the demo's step 2, `--threads` threads) and read its left/right
numbers: `left_right/acc` and the diagnostic's text cosine (`left_right/cos_left_right`) from the
base run's last evaluation, and the `pairs` probe of `launch/demo_probes.py` on the first `--pairs`
samples of `world/train_mirrored` (cos(caption, mirrored caption), partner accuracy). From the
shards of DIR/train: the share of captions that state a left/right relation, and the share of
anchors whose random batch of 64 holds a scene of the same objects with the relation the other way
round (`mirrored_in_batch`). `--object-pool K` builds every world with `--object-pool K` (its
scenes hold only K colour-shape bindings; rows `F/pool K`), `--fixed-order` with `--fixed-order`
(left/right captions name their objects in one fixed order; rows `.../fixed order`). Work goes to
`--out` (a step whose output is there is not run again); the table to
bench/results/leftright_base.json and .md, rewritten after each fraction. Not part of
bench/run_all.py: each fraction trains a base model (minutes).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "launch"))

from bench.common import RESULTS_DIR, log, markdown_table, write_result  # noqa: E402

NAME = "leftright_base"
METRICS = {"left_right_acc": "left_right/acc", "cos_left_right": "left_right/cos_left_right",
           "aro_vg_relation": "aro/vg_relation/macro", "sugarcrepe_macro": "sugarcrepe/macro",
           "val_i2t": "val/i2t_acc", "val_t2i": "val/t2i_acc"}


def read_scenes(train: Path) -> list[dict]:
    """The scene of every sample of a world shard set (its `json` member)."""
    scenes = []
    for shard in sorted(train.glob("*.tar")):
        with tarfile.open(shard) as tar:
            scenes += [json.loads(tar.extractfile(m).read())["scene"] for m in tar.getmembers()
                       if m.name.count(".") == 1 and m.name.endswith(".json")]
    return scenes


def left_of(scene: dict) -> set[tuple]:
    """(left object, right object) of every left/right relation the scene states, by binding."""
    objs = [(o["colour"], o["shape"]) for o in scene["objects"]]
    pairs = set()
    for r in scene["relations"]:
        a, b = objs[r["subject"]], objs[r["object"]]
        if r["relation"] in ("left", "right"):
            pairs.add((a, b) if r["relation"] == "left" else (b, a))
    return pairs


def mirrored_in_batch(scenes: list[dict], batch: int = 64, batches: int = 300, seed: int = 0) -> float:
    """Share of anchors whose batch of `batch` random samples holds another scene of the same
    objects with a left/right relation the other way round: the only case in which plain CLIP
    loss rewards reading left/right."""
    import random
    rng, hits = random.Random(seed), 0
    keys = [frozenset((o["colour"], o["shape"]) for o in s["objects"]) for s in scenes]
    flipped = [{(b, a) for a, b in left_of(s)} for s in scenes]
    lefts = [left_of(s) for s in scenes]
    for _ in range(batches):
        idx = rng.sample(range(len(scenes)), batch)
        hits += sum(any(j != i and keys[j] == keys[i] and flipped[j] & lefts[i] for j in idx) for i in idx)
    return hits / (batch * batches)


def run(cmd: list[str], logfile: Path, threads: int) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    t0 = time.time()
    with open(logfile, "w") as handle:
        handle.write("$ " + " ".join(cmd) + "\n")
        handle.flush()
        if subprocess.run(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"error: {cmd[1:4]} failed; see {logfile}")
    return round(time.time() - t0, 1)


def one_fraction(fraction: str, args: argparse.Namespace) -> dict:
    import torch
    torch.set_num_threads(args.threads)
    out = work_dir(fraction, args)
    world, runs = out / "world", out / "runs"
    out.mkdir(parents=True, exist_ok=True)
    row: dict = {"fraction": row_key(fraction, args)}
    if not (world / "world.json").is_file():
        extra = [] if fraction == "default" else ["--leftright-fraction", fraction]
        extra += [] if args.object_pool is None else ["--object-pool", str(args.object_pool)]
        extra += ["--fixed-order"] if args.fixed_order else []
        row["world_s"] = run([sys.executable, "-m", "compclip.datagen", "world", "build", "--out", str(world),
                              "--seed", str(args.seed), "--partners", "mirrored", "--quiet", *extra],
                             out / "world.log", args.threads)
    if not (runs / "demo_pretrain" / "DONE").is_file():
        row["pretrain_s"] = run([sys.executable, "trainer/train.py", "recipes/demo_pretrain.yaml",
                                 f"seed={args.seed}", f"logging.output_dir={runs}", "checkpoint.resume=auto",
                                 f"data.train_shards=[{world / 'train'}]",
                                 f"eval.data_root={world / 'benchmarks'}", *args.override],
                                out / "pretrain.log", args.threads)
        (runs / "demo_pretrain" / "DONE").write_text("")  # as launch/demo.py marks a finished run
    scenes = read_scenes(world / "train")
    row["leftright_share"] = round(sum(bool(left_of(s)) for s in scenes) / len(scenes), 4)
    row["mirrored_in_batch"] = round(mirrored_in_batch(scenes), 4)
    last = json.loads((runs / "demo_pretrain" / "eval.jsonl").read_text().splitlines()[-1])
    row.update({k: round(last["metrics"][m], 4) for k, m in METRICS.items()})
    row["step"] = last["step"]
    row.update(probe(last_checkpoint(runs / "demo_pretrain"), world, args.pairs))
    return row


def row_key(fraction: str, args: argparse.Namespace) -> str:
    """'F', then '/pool K' with --object-pool K, then '/fixed order' with --fixed-order."""
    return "/".join([fraction] + ([f"pool {args.object_pool}"] if args.object_pool is not None else [])
                    + (["fixed order"] if args.fixed_order else []))


def row_order(key: str) -> tuple:
    """Rows by fraction ('default' first), then pool size, then fixed order last."""
    fraction, *rest = key.split("/")
    pool = next((int(r.split()[1]) for r in rest if r.startswith("pool ")), 0)
    return (-1.0 if fraction == "default" else float(fraction), pool, "fixed order" in rest)


def work_dir(fraction: str, args: argparse.Namespace) -> Path:
    name = row_key(fraction, args).replace("/pool ", "-pool-").replace("/fixed order", "-fixed")
    return Path(args.out) / f"f-{name}"


def last_checkpoint(run_dir: Path) -> Path:
    from compclip.models.checkpoint import latest_checkpoint
    return latest_checkpoint(run_dir / "checkpoints")


def probe(checkpoint: Path, world: Path, pairs: int) -> dict:
    """`launch/demo_probes.py pairs` on the first `pairs` samples of world/train_mirrored."""
    from demo_probes import pair_probe, read_samples
    from compclip.models.load import load_model
    loaded = load_model(pretrained=str(checkpoint))
    numbers = pair_probe(loaded.model.eval(), loaded.preprocess, loaded.tokenizer,
                         read_samples(world / "train_mirrored", pairs))
    return {k: round(v, 4) for k, v in numbers.items()}


def finetunes(fraction: str, args: argparse.Namespace) -> dict:
    """`demo_clip_ft` and `demo_leftright` from the base of `fraction`, one after the other
    (`--threads` threads each), on that fraction's world, as the demo runs them."""
    from types import SimpleNamespace
    import demo
    import demo_report
    out = work_dir(fraction, args)
    world, runs = out / "world", out / "runs"
    result = {}
    for recipe in ("demo_clip_ft", "demo_leftright"):
        if not (runs / recipe / "DONE").is_file():
            shards = ",".join(str(world / name) for name in demo.TRAIN_SET[recipe])
            run([sys.executable, "trainer/train.py", f"recipes/{recipe}.yaml", f"seed={args.seed}",
                 f"logging.output_dir={runs}", "checkpoint.resume=auto", f"data.train_shards=[{shards}]",
                 f"eval.data_root={world / 'benchmarks'}", f"model.pretrained={last_checkpoint(runs / 'demo_pretrain')}"],
                out / f"{recipe}.log", args.threads)
            (runs / recipe / "DONE").write_text("")
        last = json.loads((runs / recipe / "eval.jsonl").read_text().splitlines()[-1])["metrics"]
        row = {k: round(last[m], 4) for k, m in METRICS.items() if m in last}
        partner = demo_report.inbatch_numbers(SimpleNamespace(dir=out, runs=runs), recipe).get("partner_acc", {})
        row.update({f"partner_acc_{k}": round(100 * v, 1) for k, v in partner.items()})
        row.update({f"probe_{k}": v for k, v in probe(last_checkpoint(runs / recipe), world, args.pairs).items()})
        result[recipe] = row
    return result


def markdown(rows: list[dict], tuned: dict, command: str) -> str:
    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}"
    table = markdown_table(
        ["--leftright-fraction", "captions stating left/right", "mirrored scene in batch", "left_right/acc",
         "cos(left, right caption)", "partner acc (train_mirrored)", "cos(caption, mirrored caption)",
         "ARO VG-Relation", "val in-batch I2T / T2I"],
        [[r["fraction"], pct(r["leftright_share"]), pct(r.get("mirrored_in_batch")), pct(r["left_right_acc"]),
          f"{r['cos_left_right']:.4f}", f"{r['partner_acc']:.1f} ({r['pairs']})", f"{r['cos_caption_mirrored']:.4f}",
          pct(r["aro_vg_relation"]), f"{pct(r['val_i2t'])} / {pct(r['val_t2i'])}"] for r in rows])
    text = (f"# The demo's base model per share of left/right captions\n\nLast run: `{command}` (rows and "
            "finetunes of earlier runs are kept; docs/demo_leftright.md lists every command)\n\n"
            "One seed per row, preliminary; accuracies in %. See docs/demo_leftright.md.\n\n"
            + table + "\n")
    for fraction, runs in tuned.items():
        text += f"\nFinetunes from the base of --leftright-fraction {fraction}:\n\n" + markdown_table(
            ["recipe", "left_right/acc", "ARO VG-Relation", "SugarCrepe macro", "partner acc: train first / last epoch",
             "partner acc: val", "probe partner acc", "probe cos(caption, mirrored caption)"],
            [[recipe, pct(r["left_right_acc"]), pct(r["aro_vg_relation"]), pct(r["sugarcrepe_macro"]),
              f"{r.get('partner_acc_train_first', '-')} / {r.get('partner_acc_train_last', '-')}",
              r.get("partner_acc_val_end", "-"), f"{r['probe_partner_acc']:.1f}",
              f"{r['probe_cos_caption_mirrored']:.4f}"] for recipe, r in runs.items()]) + "\n"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/bench_leftright_base.py", description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", nargs="*", default=["default", "0", "0.002", "0.02", "0.1", "1"],
                        help="values of --leftright-fraction, 'default' for the world's own mix")
    parser.add_argument("--finetune", nargs="*", default=[],
                        help="fractions whose base is then finetuned with demo_clip_ft and demo_leftright")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=1000, help="mirrored pairs probed (first shard)")
    parser.add_argument("--out", default="runs/leftright_base", help="work folder")
    parser.add_argument("--override", nargs="*", default=[], help="extra key=value for demo_pretrain")
    parser.add_argument("--object-pool", type=int, default=None, metavar="K",
                        help="build every world with --object-pool K (rows 'F/pool K')")
    parser.add_argument("--fixed-order", action="store_true",
                        help="build every world with --fixed-order (rows '.../fixed order')")
    args = parser.parse_args(argv)
    path = RESULTS_DIR / f"{NAME}.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    rows = {r["fraction"]: r for r in old.get("rows", [])}
    tuned = old.get("finetunes", {})
    command = "python bench/bench_leftright_base.py " + " ".join(argv if argv is not None else sys.argv[1:])

    def save() -> None:
        ordered = sorted(rows.values(), key=lambda r: row_order(r["fraction"]))
        write_result(NAME, {"seed": args.seed, "threads": args.threads, "override": args.override,
                            "rows": ordered, "finetunes": tuned})
        (RESULTS_DIR / f"{NAME}.md").write_text(markdown(ordered, tuned, command.strip()))

    for fraction in args.fractions:
        log(f"fraction {fraction}")
        key = row_key(fraction, args)
        rows[key] = {**rows.get(key, {}), **one_fraction(fraction, args)}
        save()
        log(json.dumps(rows[key]))
    for fraction in args.finetune:
        log(f"finetunes from the base of fraction {fraction}")
        key = row_key(fraction, args)
        tuned[key] = finetunes(fraction, args)
        save()
        log(json.dumps(tuned[key]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
