"""Left/right argument order on every pair of shapes: the demo's base, control and pairs (issue 38).

    .venv/bin/python bench/bench_leftright_shape_pairs.py --demo runs/demo --seeds 0 1 2

`left_right/acc` scores the VG-Relation items stated with "to the left of" / "to the right of",
and a world builds those items around its split's held-out left/right relation triples (one to
three of the four `Split.make` holds out), so each seed's `left_right/acc` asks about one to three
pairs of shapes. This script asks the same question of all 15 pairs of shapes. For each pair
{a, b} and seed it writes a VG-Relation set around the triple (a, left, b) (the seed's held-out
bindings and above/below triples, benchmark seed 3000 + seed, `--items` left/right items, an even
number: half stated "to the left of", half "to the right of") and
scores the base model and the last checkpoints of `demo_clip_ft` (the control) and
`demo_leftright` (the pairs) on it with `left_right`. A pair is `held out` where the seed's split
holds it out (training never showed the two shapes side by side, the benchmark's own question);
the other pairs were shown in the finetunes' `world/`; `in couples` marks the pairs of shapes that
the layout world's object couples show (`--base layout` with `--object-couples`), the only pairs
the base and the pairs' partners were trained on side by side.
Results: bench/results/leftright_shape_pairs.json and .md (per seed and pair: items, accuracy per
model, pairs - control with McNemar's exact p; per seed: the lift on the held-out pairs and on
the others, items pooled). Not part of bench/run_all.py: it needs the demo's outputs (~5 min for
3 seeds).
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.common import RESULTS_DIR, log, markdown_table, write_result  # noqa: E402
from compclip.datagen.world.benchmarks import _Builder, write_aro  # noqa: E402
from compclip.datagen.world.shards import object_couple_bindings  # noqa: E402
from compclip.datagen.world.splits import Split  # noqa: E402
from compclip.datagen.world.vocab import SHAPES  # noqa: E402
from compclip.eval.api import run  # noqa: E402
from compclip.eval.compare import mcnemar  # noqa: E402
from compclip.eval.scorer import OpenClipScorer  # noqa: E402
from compclip.models import latest_checkpoint, load_model  # noqa: E402

MODELS = {"base": "pretrained.pt", "control": "runs/demo_clip_ft", "pairs": "runs/demo_leftright"}


def shape_pair(a: str, b: str) -> str:
    return " / ".join(sorted((a, b)))


def couple_shape_pairs(seed_dir: Path, split: Split) -> set[str] | None:
    """The shape pairs the layout world's couples show; None where it has no couples."""
    options = seed_dir / "layout_world" / "build_options.json"
    if not options.is_file() or not json.loads(options.read_text())["options"].get("--object-couples"):
        return None
    return {shape_pair(x[1], y[1]) for x, y in object_couple_bindings(int(seed_dir.name.split("-")[1]), split)}


def pair_sets(split: Split, seed: int, items: int, work: Path) -> dict[str, Path]:
    """A VG-Relation set per pair of shapes, its left/right items about that pair only."""
    above = {t for t in split.relations if t[1] == "above"}
    roots = {}
    for a, b in itertools.combinations(SHAPES, 2):
        root = work / f"{a}-{b}"
        (root / "aro").mkdir(parents=True)
        builder = _Builder(root, Split(split.bindings, frozenset({(a, "left", b)} | above)), seed=3000 + seed,
                           size=64, progress=False)
        write_aro(builder, n_relation=2 * items, n_attribution=0, n_order=0)
        roots[shape_pair(a, b)] = root
    return roots


def score_seed(seed_dir: Path, items: int, work: Path) -> dict:
    seed = int(seed_dir.name.split("-")[1])
    split = Split.load(seed_dir / "world")
    held = {shape_pair(a, b) for a, r, b in split.relations if r == "left"}
    couples = couple_shape_pairs(seed_dir, split)
    log(f"seed {seed}: writing left/right items for {len(SHAPES) * (len(SHAPES) - 1) // 2} pairs of shapes")
    roots = pair_sets(split, seed, items, work / f"seed-{seed}")
    tables = {}
    for model, rel in MODELS.items():
        path = seed_dir / rel
        weights = path if path.is_file() else latest_checkpoint(path / "checkpoints")
        if weights is None:
            raise SystemExit(f"error: {path}: no checkpoint; run bash launch/demo.sh --seeds {seed} first")
        scorer = OpenClipScorer.from_loaded(load_model("demo-vit-64", str(weights)), name=model)
        tables[model] = {pair: run(scorer, ["left_right"], str(root), progress=False, per_instance=True,
                                   reuse=False)["left_right"].table.metrics["acc"]
                         for pair, root in roots.items()}
        log(f"seed {seed}: {model} scored")
    rows = []
    for pair in roots:
        m = {model: tables[model][pair] for model in MODELS}
        p, (only_control, only_pairs) = mcnemar(m["control"], m["pairs"])
        rows.append({"shapes": pair, "held_out": pair in held, "in_couples": None if couples is None else pair in couples,
                     "items": int(len(m["pairs"].values)), **{k: v.point() for k, v in m.items()},
                     "lift": m["pairs"].point() - m["control"].point(), "mcnemar_p": p,
                     "discordant": [only_control, only_pairs]})
    summary = {}
    for name, keep in (("held_out", lambda r: r["held_out"]), ("other", lambda r: not r["held_out"])):
        chosen = [r for r in rows if keep(r)]
        n = sum(r["items"] for r in chosen)
        summary[name] = {"shape_pairs": len(chosen), "items": n,
                         **{k: sum(r[k] * r["items"] for r in chosen) / n for k in ("base", "control", "pairs", "lift")},
                         "positive_lift": sum(r["lift"] > 0 for r in chosen)}
    return {"heldout_left_right": sorted(held), "rows": rows, "summary": summary}


def markdown(per_seed: dict[int, dict], items: int) -> str:
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    lines = ["# Left/right argument order on every pair of shapes (bench/bench_leftright_shape_pairs.py)", "",
             f"{items} left/right items per pair of shapes and seed (VG-Relation's template, true against "
             "arguments swapped); last-epoch models of `bash launch/demo.sh`. Accuracy in %; lift = pairs - "
             "control, points; p: McNemar's exact test.", ""]
    for seed, res in per_seed.items():
        s = res["summary"]
        lines += [f"## Seed {seed}", "",
                  f"Held out (the seed's `left_right/acc`): {', '.join(res['heldout_left_right'])}. Lift on the "
                  f"held-out pair(s) {100 * s['held_out']['lift']:+.1f}, on the other {s['other']['shape_pairs']} pairs "
                  f"{100 * s['other']['lift']:+.1f} (positive on {s['other']['positive_lift']} of them).", "",
                  markdown_table(["shapes", "held out", "in couples", "items", "base", "control", "pairs", "lift", "p"],
                                 [[r["shapes"], "yes" if r["held_out"] else "", {None: "-", True: "yes", False: ""}[r["in_couples"]],
                                   r["items"], pct(r["base"]), pct(r["control"]), pct(r["pairs"]),
                                   f"{100 * r['lift']:+.1f}", f"{r['mcnemar_p']:.2g}"] for r in res["rows"]]), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default=str(ROOT / "runs" / "demo"), help="the demo's output folder")
    ap.add_argument("--seeds", type=int, nargs="+", help="default: every seed-<s> folder there")
    ap.add_argument("--items", type=int, default=300, help="left/right items per pair of shapes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS_DIR / "leftright_shape_pairs.json"))
    args = ap.parse_args(argv)
    if args.items < 2 or args.items % 2:
        ap.error(f"--items {args.items}: a positive even number (half left, half right)")
    torch.set_num_threads(args.threads)
    demo = Path(args.demo)
    seeds = args.seeds or sorted(int(p.name.split("-")[1]) for p in demo.glob("seed-*"))
    if not seeds:
        raise SystemExit(f"error: no seed-<s> folders in {demo}; run bash launch/demo.sh first")
    with tempfile.TemporaryDirectory(prefix="leftright-shape-pairs-") as work:
        per_seed = {s: score_seed(demo / f"seed-{s}", args.items, Path(work)) for s in seeds}
    write_result("leftright_shape_pairs", {"demo": str(demo), "seeds": seeds, "items": args.items,
                                           "per_seed": per_seed}, args.out)
    md = Path(args.out).with_suffix(".md")
    md.write_text(markdown(per_seed, args.items) + "\n")
    log(f"wrote {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
