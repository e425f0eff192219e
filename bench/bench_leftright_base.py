"""The demo's base model per share of left/right captions in its pretraining data (issue 38).

    .venv/bin/python bench/bench_leftright_base.py --fractions default 0 0.002 0.02 0.1 1

For each fraction (`default`: the world's own mix, as `bash launch/demo.sh` builds it), one seed:
build the world with `--leftright-fraction F --partners mirrored`, train the base model
(`recipes/demo_pretrain.yaml`, as the demo's step 2, `--threads` threads) and read its left/right
numbers: `left_right/acc` and the diagnostic's text cosine (`left_right/cos_left_right`) from the
base run's last evaluation, and the `pairs` probe of `launch/demo_probes.py` on the first `--pairs`
samples of `world/train_mirrored` (cos(caption, mirrored caption), partner accuracy). The share of
DIR/train's captions that state a left/right relation is counted from the shards. Work goes to
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


def leftright_share(train: Path) -> float:
    """Share of a shard set's samples whose scene states a left/right relation."""
    from compclip.datagen.world.scene import Rel
    total = stated = 0
    for shard in sorted(train.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                if member.name.count(".") == 1 and member.name.endswith(".json"):
                    scene = json.loads(tar.extractfile(member).read())["scene"]
                    total += 1
                    stated += any(Rel(**r).relation in ("left", "right") for r in scene["relations"])
    return stated / total


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
    from demo_probes import pair_probe, read_samples
    from compclip.models.checkpoint import latest_checkpoint
    from compclip.models.load import load_model
    import torch
    torch.set_num_threads(args.threads)
    out = Path(args.out) / f"f-{fraction}"
    world, runs = out / "world", out / "runs"
    out.mkdir(parents=True, exist_ok=True)
    row: dict = {"fraction": fraction}
    if not (world / "world.json").is_file():
        extra = [] if fraction == "default" else ["--leftright-fraction", fraction]
        row["world_s"] = run([sys.executable, "-m", "compclip.datagen", "world", "build", "--out", str(world),
                              "--seed", str(args.seed), "--partners", "mirrored", "--quiet", *extra],
                             out / "world.log", args.threads)
    if not (runs / "demo_pretrain" / "DONE").is_file():
        row["pretrain_s"] = run([sys.executable, "trainer/train.py", "recipes/demo_pretrain.yaml",
                                 f"seed={args.seed}", f"logging.output_dir={runs}", "checkpoint.resume=auto",
                                 f"data.train_shards=[{world / 'train'}]",
                                 f"eval.data_root={world / 'benchmarks'}", *args.override],
                                out / "pretrain.log", args.threads)
    row["leftright_share"] = round(leftright_share(world / "train"), 4)
    last = json.loads((runs / "demo_pretrain" / "eval.jsonl").read_text().splitlines()[-1])
    row.update({k: round(last["metrics"][m], 4) for k, m in METRICS.items()})
    row["step"] = last["step"]
    loaded = load_model(pretrained=str(latest_checkpoint(runs / "demo_pretrain" / "checkpoints")))
    probe = pair_probe(loaded.model.eval(), loaded.preprocess, loaded.tokenizer,
                       read_samples(world / "train_mirrored", args.pairs))
    row.update({k: round(v, 4) for k, v in probe.items()})
    return row


def markdown(rows: list[dict], command: str) -> str:
    def pct(x):
        return f"{100 * x:.1f}"
    table = markdown_table(
        ["--leftright-fraction", "captions stating left/right", "left_right/acc", "cos(left, right caption)",
         "partner acc (train_mirrored)", "cos(caption, mirrored caption)", "ARO VG-Relation",
         "val in-batch I2T / T2I"],
        [[r["fraction"], pct(r["leftright_share"]), pct(r["left_right_acc"]), f"{r['cos_left_right']:.4f}",
          f"{r['partner_acc']:.1f} ({r['pairs']})", f"{r['cos_caption_mirrored']:.4f}", pct(r["aro_vg_relation"]),
          f"{pct(r['val_i2t'])} / {pct(r['val_t2i'])}"] for r in rows])
    return (f"# The demo's base model per share of left/right captions\n\n`{command}`\n\n"
            "One seed per row, preliminary; accuracies in %. See docs/demo.md (left-right section).\n\n"
            + table + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/bench_leftright_base.py", description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", nargs="+", default=["default", "0", "0.002", "0.02", "0.1", "1"],
                        help="values of --leftright-fraction, 'default' for the world's own mix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=1000, help="mirrored pairs probed (first shard)")
    parser.add_argument("--out", default="runs/leftright_base", help="work folder")
    parser.add_argument("--override", nargs="*", default=[], help="extra key=value for demo_pretrain")
    args = parser.parse_args(argv)
    path = RESULTS_DIR / f"{NAME}.json"
    old = json.loads(path.read_text())["rows"] if path.is_file() else []
    rows = {r["fraction"]: r for r in old}
    command = "python bench/bench_leftright_base.py " + " ".join(argv if argv is not None else sys.argv[1:])
    for fraction in args.fractions:
        log(f"fraction {fraction}")
        rows[fraction] = {**rows.get(fraction, {}), **one_fraction(fraction, args)}
        ordered = sorted(rows.values(), key=lambda r: -1.0 if r["fraction"] == "default" else float(r["fraction"]))
        write_result(NAME, {"seed": args.seed, "threads": args.threads, "override": args.override,
                            "rows": ordered})
        (RESULTS_DIR / f"{NAME}.md").write_text(markdown(ordered, command.strip()))
        log(json.dumps(rows[fraction]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
