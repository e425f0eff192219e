"""Caption inputs, shard output, resume after a kill, parallel workers, the CLI."""
import csv
import json
from collections import Counter
from itertools import product

import pytest

from compclip.datagen.negatives.captions_io import InputError, read_items
from compclip.datagen.negatives.__main__ import main as cli
from compclip.datagen.negatives.pipeline import run_generate
from compclip.shardset.schema import ShardSample
from compclip.shardset.shards import ShardSetWriter, iter_raw_samples, read_manifest, shard_urls, verify_shard_set
from compclip.datagen.negatives.pipeline import GenerateOptions, run_generate
from tests.fixtures.faults import Killed, killed_after

ADJ = ["red", "small", "old", "wooden"]
NOUN = ["dog", "man", "table", "horse", "woman"]
VERB = ["sitting", "standing", "sleeping"]
PLACE = ["bench", "beach", "street"]


def captions(n: int) -> list[str]:
    caps = [f"A {a} {b} is {v} on a {a2} {p} with a {b2}."
            for a, b, v, p, a2, b2 in product(ADJ, NOUN, VERB, PLACE, ADJ[::-1], NOUN[::-1])]
    caps = caps[:n]
    for i in range(0, n, 37):  # bad captions, skipped and counted
        caps[i] = ["", "dog " * 1000, "Ein Hund schläft auf der roten Bank im Park"][i % 3]
    return caps


def write_csv(path, caps, delimiter=","):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(["filepath", "caption"])
        for i, c in enumerate(caps):
            w.writerow([f"images/{i}.jpg", c])
    return path


def shas(directory):
    return [(s["name"], s["sha256"], s["inputs"]) for s in read_manifest(directory)["shards"]]


def test_coco_2017_and_karpathy_json(tmp_path):
    coco = tmp_path / "captions_val2017.json"
    coco.write_text(json.dumps({"images": [{"id": 7, "file_name": "000000000007.jpg"}],
                                "annotations": [{"id": 70, "image_id": 7, "caption": "A dog."},
                                                {"id": 71, "image_id": 7, "caption": "A cat."}]}))
    items = list(read_items(coco))
    assert [(i.key, i.caption, i.meta["image_path"]) for i in items] == [
        ("coco70", "A dog.", "000000000007.jpg"), ("coco71", "A cat.", "000000000007.jpg")]
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(json.dumps({"images": [{"filepath": "val2014", "filename": "x.jpg", "cocoid": 3,
                                                "split": "test", "sentences": [
                                                    {"raw": "A bird.", "sentid": 5}]}]}))
    (item,) = read_items(karpathy)
    assert (item.key, item.caption, item.meta["image_path"], item.meta["split"]) == (
        "coco5", "A bird.", "val2014/x.jpg", "test")
    coco.write_text(json.dumps({"annotations": [{"id": 1, "caption": "no image id"}]}))
    with pytest.raises(InputError, match=r"captions_val2017.json: annotations\[0\]"):
        list(read_items(coco))


def test_csv_tsv_and_bad_tables(tmp_path):
    caps = ["A dog.", "A cat, sleeping."]
    for name, delim in (("a.csv", ","), ("a.tsv", "\t")):
        items = list(read_items(write_csv(tmp_path / name, caps, delim)))
        assert [i.caption for i in items] == caps
        assert items[1].meta["image_path"] == "images/1.jpg" and items[1].key == "a_000000001"
    bad = tmp_path / "bad.csv"
    bad.write_text("image,label\nx.jpg,A dog\n")
    with pytest.raises(InputError, match=r"bad.csv: line 1: no caption column"):
        list(read_items(bad))
    bad.write_text("image,caption\nx.jpg,A dog\ny.jpg\n")
    with pytest.raises(InputError, match=r"bad.csv: line 3"):
        list(read_items(bad))
    (tmp_path / "a.csv.gz").write_text("")
    with pytest.raises(InputError, match="a.csv.gz: unknown input type"):
        read_items(tmp_path / "a.csv.gz")


def test_generate_text_only_shards_and_skip_counts(tmp_path):
    caps = captions(80)
    src = write_csv(tmp_path / "caps.csv", caps)
    out = tmp_path / "out"
    result = run_generate(src, out, GenerateOptions(shard_size=30, chunk_size=25, progress=False, plausibility=None))
    manifest = result["manifest"]
    assert manifest["complete"] and sum(s["inputs"] for s in manifest["shards"]) == 80
    skipped = {}
    for s in manifest["shards"]:
        for k, v in s["skipped"].items():
            skipped[k] = skipped.get(k, 0) + v
    assert skipped == {"empty": 1, "too_long": 1, "non_english": 1}
    totals = verify_shard_set(out, require_image=False)
    assert totals["samples"] == 77 and totals["negatives"] > 77 * 5
    sample = ShardSample.from_wds(next(iter_raw_samples(shard_urls(out)[0])), require_image=False)
    assert sample.image is None and sample.meta["image_path"].startswith("images/")
    assert {n.kind for n in sample.negatives} == {"swap", "replace", "add"}
    # coverage, recomputed from the shards: share of the 80 input captions (3 skipped) with at
    # least one negative of a kind / of a kind:subkind
    stats = result["stats"]
    per_sample = [ShardSample.from_wds(raw, require_image=False).negatives
                  for url in shard_urls(out) for raw in iter_raw_samples(url)]
    for kind in ("swap", "replace", "add"):
        want = sum(any(n.kind == kind for n in negs) for negs in per_sample) / 80
        assert stats["coverage_kind"][kind] == pytest.approx(want, abs=1e-4), kind
    subkinds = {f"{n.kind}:{n.subkind}" for negs in per_sample for n in negs}
    for label in subkinds:
        want = sum(any(f"{n.kind}:{n.subkind}" == label for n in negs) for negs in per_sample) / 80
        assert stats["coverage"][label] == pytest.approx(want, abs=1e-4), label
    assert set(stats["coverage"]) >= subkinds and all(":" in k for k in stats["coverage"])
    assert all(v == 0.0 for k, v in stats["coverage"].items() if k not in subkinds)  # never fired: listed at 0
    assert stats["coverage_kind"]["replace"] == pytest.approx(77 / 80, abs=1e-3)
    assert stats["coverage_any"] == pytest.approx(sum(bool(negs) for negs in per_sample) / 80, abs=1e-4)
    assert json.loads((out / "negatives_stats.json").read_text())["coverage_kind"] == stats["coverage_kind"]
    assert (out / "vocab.json").is_file()


def hand_negatives():
    """Six captions' negatives with a known coverage (see `test_coverage_per_kind_on_hand_lists`)."""
    from compclip.shardset.schema import Negative
    neg = lambda label: Negative("x", *label.split(":"))  # noqa: E731
    return [[neg("swap:obj"), neg("swap:att"), neg("replace:obj")], [neg("swap:noun")], [],
            [neg("add:obj"), neg("add:obj")], [neg("replace:rel"), neg("add:att")], [neg("swap:obj")]]


def test_coverage_per_kind_on_hand_lists():
    """By hand: swap is covered by captions 1, 2, 6 (3/6, though its sub-kinds add up to 4/6 and
    the best one is 2/6); replace by 1, 5; add by 4, 5 (caption 4's two add:obj count once)."""
    from compclip.datagen.negatives.base import Coverage
    from compclip.datagen.negatives.pipeline import _count, _finish_stats
    want_kind = {"add": 2 / 6, "replace": 2 / 6, "swap": 3 / 6}
    want_sub = {"add:att": 1 / 6, "add:obj": 1 / 6, "replace:obj": 1 / 6, "replace:rel": 1 / 6,
                "swap:att": 1 / 6, "swap:noun": 1 / 6, "swap:obj": 2 / 6}
    report = Coverage().update(hand_negatives()).report()
    assert report["coverage_kind"] == pytest.approx(want_kind, abs=1e-4)
    assert report["coverage"] == pytest.approx(want_sub, abs=1e-4)
    assert report["coverage_any"] == pytest.approx(5 / 6, abs=1e-4)
    # selected kinds that never fire are listed at 0.0
    zero = Coverage([("swap", "adverb"), ("replace", "att"), ("swap", "obj")]).update(hand_negatives()).report()
    assert zero["coverage"]["swap:adverb"] == 0.0 and zero["coverage"]["replace:att"] == 0.0
    assert zero["coverage"]["swap:obj"] == pytest.approx(2 / 6, abs=1e-4)
    assert zero["coverage_kind"] == pytest.approx(want_kind, abs=1e-4)
    # the generator's closing report counts the same way
    counts = Counter()
    for negs in hand_negatives():
        _count(counts, negs)
    final = _finish_stats(counts, [], 1.0)
    assert final["coverage_kind"] == pytest.approx(want_kind, abs=1e-4)
    assert final["coverage"] == pytest.approx(want_sub, abs=1e-4)
    assert final["negatives"]["add:obj"] == 2 and final["coverage_any"] == pytest.approx(5 / 6, abs=1e-4)


def test_resume_after_kill_is_byte_identical(tmp_path):
    src = write_csv(tmp_path / "caps.csv", captions(150))
    full, killed = tmp_path / "full", tmp_path / "killed"
    run_generate(src, full, GenerateOptions(shard_size=40, chunk_size=25, progress=False))
    with pytest.raises(Killed), killed_after(100):
        run_generate(src, killed, GenerateOptions(shard_size=40, chunk_size=25, progress=False))
    part = {"manifest": read_manifest(killed)}
    assert not part["manifest"]["complete"]
    n_done = len(part["manifest"]["shards"])
    assert 0 < n_done < len(shas(full)) and shas(killed) == shas(full)[:n_done]
    resumed = run_generate(src, killed, GenerateOptions(shard_size=40, chunk_size=25, progress=False))
    assert resumed["resumed_from"] == sum(s["inputs"] for s in part["manifest"]["shards"]) > 0
    assert shas(killed) == shas(full)
    # the closing report covers the whole set, the shards of the killed run too (before: only
    # the 68 captions of the resumed run): equal to the uninterrupted run's, timings aside
    reports = [json.loads((d / "negatives_stats.json").read_text()) for d in (full, killed)]
    for report in reports:
        for timing in ("seconds", "captions_per_s", "resumed_from"):
            report.pop(timing)
    assert reports[1] == reports[0] and reports[1]["captions"] == 150
    assert reports[1]["skipped"] == {"empty": 2, "non_english": 1, "too_long": 2}
    assert resumed["stats"] == {**reports[1], "seconds": resumed["stats"]["seconds"],
                                "captions_per_s": resumed["stats"]["captions_per_s"],
                                "resumed_from": resumed["resumed_from"]}


@pytest.mark.slow
def test_two_workers_match_one(tmp_path):
    src = write_csv(tmp_path / "caps.csv", captions(60))
    run_generate(src, tmp_path / "one", GenerateOptions(shard_size=25, chunk_size=10, progress=False))
    run_generate(src, tmp_path / "two", GenerateOptions(shard_size=25, chunk_size=10, progress=False, workers=2))
    assert shas(tmp_path / "two") == shas(tmp_path / "one")


def test_shard_input_keeps_images_undecoded(tmp_path):
    src = tmp_path / "src"
    with ShardSetWriter(src, max_count=4) as w:
        for i, cap in enumerate(captions(12)[1:11]):
            w.add(ShardSample(f"s{i:03d}", cap, image=b"\xff\xd8 not really a jpeg " + bytes([i]),
                              meta={"i": i}))
    out = tmp_path / "out"
    run_generate(src, out, GenerateOptions(shard_size=100, progress=False, plausibility=None))
    run_generate(out, tmp_path / "again", GenerateOptions(shard_size=100, progress=False,
                 plausibility=None))  # rule negatives replaced
    again = [r for u in shard_urls(tmp_path / "again") for r in iter_raw_samples(u)]
    first = [r for u in shard_urls(out) for r in iter_raw_samples(u)]
    assert [r["neg.json"] for r in again] == [r["neg.json"] for r in first]
    before = {r["__key__"]: r for u in shard_urls(src) for r in iter_raw_samples(u)}
    after = [r for u in shard_urls(out) for r in iter_raw_samples(u)]
    assert [r["__key__"] for r in after] == sorted(before)
    for raw in after:
        assert raw["jpg"] == before[raw["__key__"]]["jpg"] and raw["txt"] == before[raw["__key__"]]["txt"]
        assert json.loads(raw["json"]) == json.loads(before[raw["__key__"]]["json"])
        assert json.loads(raw["neg.json"])
    assert verify_shard_set(out)["samples"] == 10


def test_cli_generate(tmp_path, capsys):
    src = write_csv(tmp_path / "caps.csv", captions(30)[1:], "\t")
    tsv = src.rename(tmp_path / "caps.tsv")
    assert cli(["generate", "--src", str(tsv), "--out", str(tmp_path / "out"), "--kinds", "swap,add:obj",
                "--mode", "all", "--cap", "3", "--quiet"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert set(k.split(":")[0] for k in stats["negatives"]) == {"swap", "add"}
    assert "add:obj" in stats["negatives"] and "replace:obj" not in stats["negatives"]
    assert cli(["generate", "--src", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o2")]) == 2
    assert "missing.csv: no such file" in capsys.readouterr().err
