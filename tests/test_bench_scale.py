"""bench/bench_scale.py: the log-log fit, projections and flags on exact power laws, distinct
COCO-like captions, `--sizes` parsing, and a tiny real run of two stages writing its JSON (its
numbers are not checked: timings belong to the bench)."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import bench_scale as bs

ROOT = Path(__file__).resolve().parents[1]


def runs(times, peaks, sizes=(1000, 4000, 16000)):
    return [{"n": n, "seconds": t, "peak_rss_mib": p} for n, t, p in zip(sizes, times, peaks)]


def test_fit_recovers_the_exponent_of_a_power_law():
    sizes = [1000, 4000, 16000]
    for a in (0.5, 1.0, 1.94):
        exponent, b = bs.fit_exponent(sizes, [3e-4 * n ** a for n in sizes])
        assert exponent == pytest.approx(a) and math.exp(b) == pytest.approx(3e-4)
    with pytest.raises(ValueError):
        bs.fit_exponent([10, 10], [1.0, 2.0])
    with pytest.raises(ValueError):
        bs.fit_exponent([10], [1.0])


def test_row_projections_follow_the_fit_and_flags_follow_the_thresholds():
    row = bs.summarize_row("shuffle", runs([0.001 * n for n in (1000, 4000, 16000)], [100, 100, 100]))
    assert row["time_exponent"] == pytest.approx(1.0) and row["flags"] == []
    assert row["projected"]["COCO"] == {"n": 600_000, "seconds": pytest.approx(600.0), "peak_rss_mib": 100.0}
    assert row["projected"]["CC12M"]["seconds"] == pytest.approx(12_000.0)
    steep = bs.summarize_row("negatives", runs([1e-4 * n ** 1.2 for n in (1000, 4000, 16000)], [100, 130, 150]))
    assert steep["flags"] == ["time exponent 1.20 > 1.1", "peak memory x1.50 over x16 the data (> 1.2)"]
    quadratic = bs.summarize_row("exact_knn", runs([1e-8 * n ** 2 for n in (1000, 4000, 16000)], [100, 105, 110]))
    assert quadratic["time_exponent"] == pytest.approx(2.0) and quadratic["flags"] == []


def test_coco_like_captions_are_distinct_and_of_the_source_length():
    pairs = [("A dog sits on a red bed", "A cat sits on a red bed"),
             ("Two men ride bikes in the park", "Two men ride horses in the park"),
             ("A woman holds an umbrella near the station", "A man holds an umbrella near the station"),
             ("A plate of food with a fork", "A bowl of food with a fork")]
    got = bs.coco_like_captions(16, pairs)  # 4 x 4 head / tail joins, the first 4 the sources
    assert got[:4] == pairs and len({c for c, _ in got}) == 16
    assert all(c != neg for c, neg in got)
    words = [len(c.split()) for c, _ in got]
    assert 4 <= min(words) and max(words) <= 12
    assert got[4] == ("A dog sits in the park", "A cat sits in the park")  # head of 0, tail of 1
    with pytest.raises(ValueError, match="only 16 distinct captions of 17"):
        bs.coco_like_captions(17, pairs)


def test_sizes_are_parsed_per_stage_and_bad_ones_refused():
    assert bs.parse_sizes(["eval=10,40,160", "shards=5,20"]) == {"eval": (10, 40, 160), "shards": (5, 20)}
    for bad in ("nothing=1,2,3", "eval=3,2,1", "eval=10", "eval=a,b"):
        with pytest.raises(SystemExit):
            bs.parse_sizes([bad])


@pytest.mark.skipif(not Path(bs.GNU_TIME).is_file(), reason="GNU time not installed")
def test_a_tiny_run_writes_every_row_with_fits(tmp_path):
    folder = tmp_path / "sc"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({str(i): {"caption": f"A dog number {i} on a bed",
                                                        "negative_caption": f"A cat number {i} on a bed"}
                                               for i in range(50)}))
    out = tmp_path / "scale.json"
    env = {**os.environ, "COMPCLIP_COCO_CAPTIONS": str(folder)}
    subprocess.run([sys.executable, "bench/bench_scale.py", "--only", "shards,shuffle", "--sizes", "shards=40,80,160",
                    "--sizes", "shuffle=40,80", "--image-px", "16", "--work-dir", str(tmp_path / "work"),
                    "--out", str(out)], cwd=ROOT, env=env, check=True, capture_output=True)
    r = json.loads(out.read_text())
    assert list(r["rows"]) == ["shards", "shuffle"]
    assert [x["n"] for x in r["rows"]["shards"]["runs"]] == [40, 80, 160]
    assert [x["n"] for x in r["rows"]["shuffle"]["runs"]] == [40, 80]
    for row in r["rows"].values():
        assert all(x["seconds"] > 0 and x["peak_rss_mib"] > 10 for x in row["runs"])
        assert set(row["projected"]) == {"COCO", "CC3M", "CC12M"} and isinstance(row["flags"], list)
    assert r["rows"]["shuffle"]["runs"][0]["command"].endswith(
        "-m compclip.datagen shuffle --src WORK/set-40 --out WORK/shuffled-40 --quiet")
    assert "bench/bench_scale.py" in r["meta"]["command"]
