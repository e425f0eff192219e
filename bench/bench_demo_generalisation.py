"""Seen vs unseen compositions: the offline demo's finetuned models on two benchmark sets per seed.

    .venv/bin/python bench/bench_demo_generalisation.py                 # after bash launch/demo.sh --seeds 0 1 2
    .venv/bin/python bench/bench_demo_generalisation.py --bench-scale 1 --seeds 0

The demo's benchmarks (datagen.world) state compositions training never showed (held-out
colour-shape bindings and relation triples): they measure generalisation to unseen compositions.
The papers' benchmarks (SugarCrepe, ARO, BiVLC on COCO / Visual Genome images) mostly ask about
compositions of kinds the training data holds. This script builds, for each demo seed, two fresh
benchmark sets of the same size and generator (benchmark seed 1000 + seed):
- `unseen`: the seed's own split, as in the demo;
- `seen`: a split whose "held-out" bindings and relation triples are ones training did show
  (disjoint from the seed's held-out ones), and whose items state no held-out composition of the
  seed's split (VG-Attribution's second object is drawn at random and may still be one),
and scores every model of the seed (the base and the four finetunes, last epoch) on both.
Results: bench/results/demo_generalisation.json and .md (per set: mean ± std over seeds, and the
difference to the control); docs/demo.md quotes them. Not part of bench/run_all.py: it needs the
demo's outputs and takes ~10 minutes for 3 seeds.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "launch"))

import torch  # noqa: E402

from bench.common import RESULTS_DIR, log, write_result  # noqa: E402
from compclip.datagen.world.benchmarks import BenchSizes, write_benchmarks  # noqa: E402
from compclip.datagen.world.scene import Scene  # noqa: E402
from compclip.datagen.world.splits import Split, choose_relations  # noqa: E402
from compclip.datagen.world.vocab import COLOURS, SHAPES  # noqa: E402
from demo import FINETUNES, METRICS, summarise_metrics, tables  # noqa: E402  (launch/demo.py)
from compclip.eval.api import evaluate  # noqa: E402
from compclip.eval.scorer import OpenClipScorer  # noqa: E402
from compclip.models import latest_checkpoint, load_model  # noqa: E402

BENCHMARKS = ["visla", "sugarcrepe", "bivlc", "aro"]
MODELS = ("demo_pretrain",) + FINETUNES
SETS = ("unseen", "seen")


@dataclass(frozen=True)
class SeenSplit(Split):
    """A split whose 'held-out' compositions were seen in training under `avoid` (the demo seed's
    real split); its benchmark scenes state none of `avoid`'s held-out compositions."""
    avoid: Optional[Split] = None

    @classmethod
    def around(cls, avoid: Split, seed: int, n_relations: int = 4) -> "SeenSplit":
        rng = random.Random(f"seen-split:{seed}")
        while True:  # a colour -> shape matching disjoint from the held-out one
            shapes = list(SHAPES)
            rng.shuffle(shapes)
            bindings = frozenset(zip(COLOURS, shapes))
            if not bindings & avoid.bindings:
                break
        unseen = avoid.relations | {(b, r, a) for a, r, b in avoid.relations}
        triples = [(a, r, b) for a in SHAPES for b in SHAPES if a != b for r in ("left", "above")
                   if (a, r, b) not in unseen]
        rng.shuffle(triples)
        return cls(bindings, choose_relations(triples, n_relations), avoid)

    def heldout_scene(self, rng: random.Random, need: str = "any", **kwargs) -> Scene:
        for _ in range(10_000):
            scene = super().heldout_scene(rng, need, **kwargs)
            if not self.avoid.spec_heldout(scene):
                return scene
        raise RuntimeError(f"no seen-composition scene of kind '{need}' found")


def model_paths(seed_dir: Path) -> dict[str, Path]:
    paths = {"demo_pretrain": seed_dir / "pretrained.pt"}
    for recipe in FINETUNES:
        paths[recipe] = latest_checkpoint(seed_dir / "runs" / recipe / "checkpoints")
    missing = [r for r, p in paths.items() if p is None or not p.is_file()]
    if missing:
        raise SystemExit(f"error: {seed_dir}: demo output incomplete, no model for {missing}; "
                         f"run bash launch/demo.sh --seeds ... first")
    return paths


def score_seed(seed_dir: Path, seed: int, scale: float, work: Path) -> dict:
    split = Split.load(seed_dir / "world")
    splits = {"unseen": split, "seen": SeenSplit.around(split, seed)}
    roots = {}
    for name, s in splits.items():
        roots[name] = work / f"seed-{seed}" / name
        log(f"seed {seed}: building the '{name}' benchmark set (scale {scale})")
        write_benchmarks(roots[name], s, seed=1000 + seed, sizes=BenchSizes().scaled(scale), progress=False)
    out: dict = {"splits": {n: s.to_json() for n, s in splits.items()}, "metrics": {}}
    for recipe, path in model_paths(seed_dir).items():
        scorer = OpenClipScorer.from_loaded(load_model("demo-vit-64", str(path)), name=recipe)
        out["metrics"][recipe] = {}
        for name in SETS:
            m = evaluate(scorer, BENCHMARKS, str(roots[name]), progress=False)
            out["metrics"][recipe][name] = {k: m[k] for k, _ in METRICS}
        log(f"seed {seed}: {recipe}: SC swap-att unseen {out['metrics'][recipe]['unseen']['sugarcrepe/swap_att']:.3f}"
            f" / seen {out['metrics'][recipe]['seen']['sugarcrepe/swap_att']:.3f}")
    return out


def markdown(per_seed: dict[int, dict], scale: float) -> tuple[str, dict]:
    """The report (two tables per set, launch/demo.py's layout) and the summaries behind it."""
    seeds = list(per_seed)
    lines = ["# Seen vs unseen compositions (bench/bench_demo_generalisation.py)", "",
             f"Seeds {seeds}, benchmark scale {scale}, last-epoch models of `bash launch/demo.sh`. "
             "Accuracy in %, mean ± sample std over seeds.", ""]
    summaries = {}
    for name in SETS:
        summaries[name] = summarise_metrics({r: {s: per_seed[s]["metrics"][r][name] for s in seeds} for r in MODELS})
        lines += [f"## {name} compositions", "", tables(summaries[name])]
    return "\n".join(lines), summaries


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default=str(ROOT / "runs" / "demo"), help="the demo's output folder")
    ap.add_argument("--seeds", type=int, nargs="+", help="default: every seed-<s> folder there")
    ap.add_argument("--bench-scale", type=float, default=2.0, help="benchmark sizes (the demo uses 1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS_DIR / "demo_generalisation.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    demo = Path(args.demo)
    seeds = args.seeds or sorted(int(p.name.split("-")[1]) for p in demo.glob("seed-*"))
    if not seeds:
        raise SystemExit(f"error: no seed-<s> folders in {demo}; run bash launch/demo.sh first")
    with tempfile.TemporaryDirectory(prefix="demo-generalisation-") as work:
        per_seed = {s: score_seed(demo / f"seed-{s}", s, args.bench_scale, Path(work)) for s in seeds}
    report, summary = markdown(per_seed, args.bench_scale)
    write_result("demo_generalisation", {"seeds": seeds, "bench_scale": args.bench_scale,
                                         "per_seed": per_seed, "summary": summary}, args.out)
    md = Path(args.out).with_suffix(".md")
    md.write_text(report)
    log(f"wrote {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
