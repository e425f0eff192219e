"""Bootstrap intervals (eval.stats): coverage by simulation, grouping by shared image, the item
tables rebuilding every benchmark's headline numbers from its per-item records, and the reports."""
import hashlib
import json

import numpy as np
import pytest
import torch

from compclip.eval import stats
from compclip.eval.api import flatten, flatten_intervals, run
from compclip.eval.report import write_reports
from compclip.eval.scorer import Scorer
from tests.fixtures.eval_data import make_data_root

BENCHMARKS = ["visla", "sugarcrepe", "sugarcrepe_pp", "bivlc", "aro", "left_right"]
ARO = {"aro": {"parts": ["vg_relation", "vg_attribution", "coco_order"]}}


class Hashed(Scorer):
    """Embeddings drawn from a seed made of the text or the image's pixels: varied, deterministic."""
    name = "hashed"

    def __init__(self, salt: str = ""):
        self.salt = salt

    def _vec(self, key: bytes) -> torch.Tensor:
        seed = int.from_bytes(hashlib.sha256(self.salt.encode() + key).digest()[:8], "little")
        return torch.from_numpy(np.random.default_rng(seed).standard_normal(8)).float()

    def encode_texts(self, texts):
        return torch.nn.functional.normalize(torch.stack([self._vec(t.encode()) for t in texts]), dim=-1)

    def encode_images(self, images):
        return torch.nn.functional.normalize(torch.stack([self._vec(im.tobytes()) for im in images]), dim=-1)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_data_root(tmp_path_factory.mktemp("stats") / "data", n=12, seed=3)


@pytest.fixture(scope="module")
def results(root):
    return run(Hashed(), BENCHMARKS, str(root), ARO, progress=False, per_instance=True)


def coverage(p: float, n_clusters: int, size: int = 1, concentration: float = 0.0, sets: int = 1000,
             grouped: bool = True, level: float = stats.LEVEL) -> float:
    """Share of `sets` simulated item sets whose interval holds the true accuracy `p`. Items come
    in clusters of `size`; with `concentration` > 0 each cluster has its own accuracy drawn from
    Beta(p c, (1 - p) c) (items of one image are alike), mean p either way."""
    rng = np.random.default_rng(12345)
    n = n_clusters * size
    clusters = np.repeat(np.arange(n_clusters), size)
    hits = 0
    for k in range(sets):
        rate = rng.beta(p * concentration, (1 - p) * concentration, n_clusters) if concentration else np.full(n_clusters, p)
        correct = rng.random(n) < rate[clusters]
        table = stats.ItemTable(clusters if grouped else np.arange(n), {"acc": stats.metric(correct, np.arange(n))})
        lo, hi = stats.intervals(table, seed=k, level=level)["acc"]
        hits += lo <= p <= hi
    return hits / sets


@pytest.mark.parametrize("n_clusters,size,concentration", [(200, 1, 0.0), (640, 1, 0.0), (160, 4, 2.0)],
                         ids=["200 items", "640 items", "160 images x 4 items"])
def test_nominal_95_covers_93_to_97_percent(n_clusters, size, concentration):
    assert 0.93 <= coverage(0.7, n_clusters, size, concentration) <= 0.97


def test_the_coverage_check_fails_intervals_too_narrow():
    # items of one image resampled as if independent: too narrow, so the check above would fail
    assert coverage(0.7, 160, 4, 2.0, grouped=False, sets=300) < 0.90
    # a nominal 80 % interval reported as 95 %: the same
    assert coverage(0.7, 200, level=0.8, sets=300) < 0.90


def test_every_item_table_gives_its_headline_numbers(results):
    """Point estimates are the benchmarks' own; the tables rebuild them from the records."""
    for name, r in results.items():
        assert r.table is not None and r.table.metrics, name
        for metric, m in r.table.metrics.items():
            assert m.point() == pytest.approx(r.headline[metric], abs=1e-12, nan_ok=True), (name, metric)
        assert set(r.intervals) <= set(r.headline)
    no_interval = {f"{b}/{k}" for b, r in results.items() for k in r.headline} - set(flatten_intervals(results))
    assert no_interval == {"aro/coco_order/std", "left_right/cos_left_right", "left_right/cos_random_nouns"} | {
        f"aro/vg_attribution/{k}" for k in ("macro", "micro")
                                                   if np.isnan(results["aro"].headline[f"vg_attribution/{k}"])}


def test_intervals_hold_the_point_and_are_reproducible(root, results):
    again = run(Hashed(), BENCHMARKS, str(root), ARO, progress=False)
    for name, r in results.items():
        assert again[name].intervals == r.intervals
        for metric, (lo, hi) in r.intervals.items():
            assert lo <= r.headline[metric] <= hi, (name, metric)
    widths = [hi - lo for r in results.values() for lo, hi in r.intervals.values()]
    assert max(widths) > 0.1  # 12 items per subset: wide


def test_items_sharing_an_image_are_one_cluster(results):
    records = results["sugarcrepe"].instances
    table = results["sugarcrepe"].table
    by_image = {}
    for r, c in zip(records, table.clusters):
        by_image.setdefault(r["image"], set()).add(int(c))
    assert all(len(c) == 1 for c in by_image.values())
    assert len(by_image) == table.n_clusters < len(records)  # the fixture reuses images across subsets
    assert list(results["bivlc"].table.clusters) == list(range(len(results["bivlc"].instances)))  # one 2x2 row each


def test_aro_order_resamples_each_caption_by_its_share_of_seeds(results):
    records = [r for r in results["aro"].instances if r["part"] == "coco_order"]
    assert {r["seeds"] for r in records} == {5}
    assert np.mean([r["seeds_correct"] / 5 for r in records]) == pytest.approx(results["aro"].headline["coco_order/mean"])
    assert not results["aro"].table.metrics["coco_order/mean"].binary


def test_a_part_missing_from_a_sample_is_left_out_of_its_macro():
    values = np.array([1.0, 0.0, 1.0])
    m = stats.metric(values, [0, 1], [2])  # macro of 0.5 and 1.0
    clusters = np.array([0, 0, 1])
    reps = stats.replicates([m], clusters, 200, seed=1)[0]
    assert set(np.round(reps, 6)) == {0.5, 0.75, 1.0}  # part 2 absent: 0.5; both: 0.75; only part 2: 1.0


def test_tables_round_trip_through_npz(results, tmp_path):
    tables = {b: r.table for b, r in results.items()}
    stats.save_tables(tables, tmp_path / "m.items.npz")
    back = stats.load_tables(tmp_path / "m.items.npz")
    assert set(back) == set(tables)
    for b, t in tables.items():
        assert np.array_equal(back[b].clusters, t.clusters) and set(back[b].metrics) == set(t.metrics)
        for k, m in t.metrics.items():
            assert np.array_equal(back[b].metrics[k].values, m.values)
            assert [sorted(p) for p in back[b].metrics[k].parts] == [sorted(p) for p in m.parts]


def test_reports_show_intervals_and_keep_every_number(results, tmp_path):
    written = write_reports({"m": results}, tmp_path, plots=True)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == {"m": flatten(results)}  # unchanged: values only
    ci = json.loads((tmp_path / "intervals.json").read_text())
    assert ci["level"] == 0.95 and ci["models"]["m"]["sugarcrepe/macro"] == list(results["sugarcrepe"].intervals["macro"])
    detail = json.loads((tmp_path / "m.json").read_text())["benchmarks"]["visla"]
    assert detail["headline"] == results["visla"].headline and "generic/i2t" in detail["intervals"]
    lo, hi = results["sugarcrepe"].intervals["macro"]
    value = 100 * results["sugarcrepe"].headline["macro"]
    md = (tmp_path / "results.md").read_text()
    assert f"| sugarcrepe/macro | {value:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] |" in md
    assert f"| add_att | {100 * results['sugarcrepe'].headline['add_att']:.1f} [" in md  # category rows too
    assert "| aro/coco_order/std | " in md and "items:m" in written and "radar" in written


def test_error_bars_run_from_the_interval_around_the_value():
    from compclip.eval.report import _yerr
    assert _yerr([60.0, 50.0], [(0.55, 0.7), None]) == [[pytest.approx(5.0), 0.0], [pytest.approx(10.0), 0.0]]
