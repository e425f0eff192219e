"""The synthetic world's benchmark sets score unchanged through eval's loaders and api."""
import json

import pytest

from compclip.datagen.world.cli import build
from compclip.eval.api import run
from compclip.eval.scorer import OpenClipScorer

BENCHMARKS = ["visla", "sugarcrepe", "sugarcrepe_pp", "bivlc", "aro"]


@pytest.fixture(scope="module")
def world_benchmarks(tmp_path_factory):
    out = tmp_path_factory.mktemp("world_eval")
    summary = build(out, seed=5, train_size=10, size=32, bench_scale=0.1, shard_size=50, progress=False)
    return out / "benchmarks", summary


def test_every_world_benchmark_scores_through_eval(world_benchmarks, micro_model):
    root, summary = world_benchmarks
    results = run(OpenClipScorer.from_loaded(micro_model), BENCHMARKS, str(root), progress=False)
    for name in BENCHMARKS:
        headline = results[name].headline
        assert headline, f"{name}: no metrics ({results[name].notes})"
        assert all(0.0 <= v <= 1.0 for k, v in headline.items() if not k.endswith(("_std", "/n"))), (name, headline)
    # every sub-part of ARO was found (none skipped for missing data)
    assert not [n for n in results["aro"].notes if "skipped" in n], results["aro"].notes
    written = {k: v for k, v in summary["sets"].items() if k.startswith("benchmarks/")}
    assert written and all(v > 0 for v in written.values()), written
    json.dumps({n: r.headline for n, r in results.items()})  # reports serialise
