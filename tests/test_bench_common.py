"""bench/common.py: repetition statistics, number formatting, markdown tables, steady-state rates.
Pure Python (no torch), well under 2 s."""
import json

import pytest

from bench import common
from bench.common import (fmt_num, fmt_stat, markdown_table, percentile, ratio_stat, steady_rate,
                          summarize)


def test_summarize_odd_and_even_counts():
    s = summarize([5.0, 1.0, 3.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3.0, 1.0, 5.0, 3)
    assert s["runs"] == [5.0, 1.0, 3.0]  # repetition order kept
    s = summarize([4, 1, 3, 2])
    assert s["median"] == 2.5
    assert (s["q1"], s["q3"]) == (1.75, 3.25)  # numpy's linear interpolation


def test_summarize_rounds_and_rejects_empty():
    assert summarize([1 / 3], digits=2)["median"] == 0.33
    with pytest.raises(ValueError):
        summarize([])


def test_percentile_matches_linear_interpolation():
    xs = [10, 20, 30, 40, 50]
    assert percentile(xs, 0) == 10 and percentile(xs, 100) == 50
    assert percentile(xs, 50) == 30
    assert percentile(xs, 10) == pytest.approx(14.0)


def test_ratio_stat_pairs_by_repetition():
    r = ratio_stat([100, 90, 120], [50, 60, 40])
    assert r["runs"] == [2.0, 1.5, 3.0]
    assert r["median"] == 2.0  # median of the paired ratios, not ratio of medians (110/50)
    with pytest.raises(ValueError):
        ratio_stat([1, 2], [1])


def test_fmt_num_and_fmt_stat():
    assert fmt_num(None) == "-"
    assert fmt_num(1234.6) == "1,235"
    assert fmt_num(123.4) == "123"
    assert fmt_num(12.34) == "12.3"
    assert fmt_num(1.234) == "1.23"
    assert fmt_num(0.01234) == "0.0123"
    assert fmt_num(0) == "0"
    assert fmt_stat(summarize([1.0, 2.0, 4.0]), "x") == "2.00x (1.00x–4.00x, n=3)"
    assert fmt_stat(summarize([150.0])) == "150 (n=1)"
    assert fmt_stat(None) == "-"


def test_markdown_table_layout_and_escaping():
    table = markdown_table(["name", "rate"], [["a|b", 1.5], ["c", None]])
    lines = table.splitlines()
    assert lines[0] == "| name | rate |"
    assert lines[1] == "|:---|---:|"
    assert lines[2] == "| a\\|b | 1.5 |"
    assert lines[3] == "| c | - |"
    assert markdown_table(["x", "y"], [], align=["r", "l"]).splitlines()[1] == "|---:|:---|"


def test_markdown_table_rejects_ragged_rows():
    with pytest.raises(ValueError):
        markdown_table(["a", "b"], [[1, 2, 3]])
    with pytest.raises(ValueError):
        markdown_table(["a", "b"], [], align=["l"])


def test_steady_rate_uses_window_after_warmup():
    # (completed steps, wall time): 10 s of start-up, then 0.5 s per step of 32 samples
    points = [(1, 10.5), (4, 12.0), (8, 14.0), (12, 16.0), (16, 18.0)]
    r = steady_rate(points, samples_per_step=32, warmup_steps=8)
    assert (r["from_step"], r["to_step"]) == (8, 16)
    assert r["samples_per_s"] == pytest.approx(64.0)
    with pytest.raises(ValueError):
        steady_rate(points, 32, warmup_steps=16)  # one point left: no window
    with pytest.raises(ValueError):
        steady_rate([(8, 5.0), (9, 5.0)], 32, 0)  # time does not advance


def test_write_and_read_result(tmp_path):
    path = common.write_result("x", {"value": 1, "meta": "replaced"}, tmp_path / "x.json")
    data = json.loads(path.read_text())
    assert data["value"] == 1
    assert set(data["meta"]) >= {"date", "command", "machine", "versions", "git_commit"}
    assert data["meta"]["versions"]["python"]
    assert common.read_result("x", tmp_path)["value"] == 1
    assert common.read_result("missing", tmp_path) is None
