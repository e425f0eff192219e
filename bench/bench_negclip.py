"""What each rule set gives the NegCLIP recipe: coverage and negatives per caption, and padding.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_negclip.py [--sugarcrepe ../shared/benchmarks/sugarcrepe]

Corpus: SugarCrepe's 4,345 distinct positive captions. For each of
- `negclip_all`: `--rules negclip --mode all --cap 64` (what docs/data_prep.md builds),
- `negclip_sample`: `--rules negclip` in sample mode (NegCLIP's script: one pair per type),
- `compclip_sample` / `compclip_all`: the compclip rules' six swap sub-kinds named after
  NegCLIP's types, sample mode and `--mode all --cap 8` (the NegCLIP recipe's data before the
  negclip rule set),
the share of captions with at least one negative, negatives per caption, the share with fewer
than 1 and 2, coverage per sub-kind, and the share of negative columns that would be padding
for a recipe drawing `per_image` negatives per anchor: 2 from the anchor (the NegCLIP recipe
before) and 1 (now, plus one from the neighbour, which is drawn from the same captions), each
without and with `--require-negative` (captions without a negative left out). Also the whole
command `python -m datagen negatives generate --rules negclip --mode all --cap 64` on the corpus
(wall seconds, start-up included). Writes bench/results/negclip_negatives.json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import log, write_result  # noqa: E402

SIX = ["swap:noun_chunk", "swap:verb_phrase", "swap:noun", "swap:noun_plural", "swap:adverb", "swap:adjective"]
RUNS = {"negclip_all": {"rules": "negclip", "mode": "all", "cap": 64},
        "negclip_sample": {"rules": "negclip"},
        "compclip_sample": {"kinds": SIX},
        "compclip_all": {"kinds": SIX, "mode": "all", "cap": 8}}


def padding(counts: list[int], per_image: int, require_negative: bool) -> float:
    """Share of `per_image` negative columns per anchor that no negative fills."""
    if require_negative:
        counts = [n for n in counts if n]
    return sum(max(0, per_image - n) for n in counts) / (per_image * len(counts))


def figures(per_caption: list[list]) -> dict:
    counts = [len(negs) for negs in per_caption]
    n = len(counts)
    subkinds: Counter[str] = Counter()
    for negs in per_caption:
        subkinds.update({neg.subkind for neg in negs})
    return {"captions": n,
            "with_negative": round(sum(c > 0 for c in counts) / n, 4),
            "negatives_per_caption": round(sum(counts) / n, 3),
            "fewer_than_2": round(sum(c < 2 for c in counts) / n, 4),
            "coverage_by_subkind": {k: round(v / n, 4) for k, v in sorted(subkinds.items())},
            "padding": {f"per_image_{p}{'_require_negative' if req else ''}": round(padding(counts, p, req), 4)
                        for p in (1, 2) for req in (False, True)}}


def whole_command(captions: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "captions.csv"
        src.write_text("filepath,caption\n" + "".join(f'img{i}.jpg,"{c.replace(chr(34), chr(39))}"\n'
                                                      for i, c in enumerate(captions)))
        cmd = [sys.executable, "-m", "compclip.datagen", "negatives", "generate", "--rules", "negclip", "--mode",
               "all", "--cap", "64", "--src", str(src), "--out", str(Path(tmp) / "out"), "--quiet"]
        t0 = time.perf_counter()
        stats = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout)
        wall = time.perf_counter() - t0
    return {"command": "python " + " ".join(cmd[1:11]) + " --src CSV --out DIR --quiet", "captions": len(captions),
            "wall_s": round(wall, 2), "captions_per_s": round(len(captions) / wall, 1),
            "coverage_any": stats["coverage_any"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sugarcrepe", default=str(ROOT.parent / "shared" / "benchmarks" / "sugarcrepe"))
    parser.add_argument("--out", default=None, help="results file (default bench/results/negclip_negatives.json)")
    args = parser.parse_args()
    from compclip.datagen.negatives.audit import sugarcrepe_captions
    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    captions = sugarcrepe_captions(args.sugarcrepe)
    result = {"corpus": f"SugarCrepe distinct positive captions ({len(captions)})"}
    for name, options in RUNS.items():
        log(f"{name}: {options}")
        result[name] = figures(RuleNegativeGenerator(**options).generate(captions, seed=0))
    log("whole command")
    result["whole_command"] = whole_command(captions)
    write_result("negclip_negatives", result, args.out)


if __name__ == "__main__":
    main()
