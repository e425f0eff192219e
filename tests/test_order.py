"""Seeded global order of every shard set (compclip.shardset.order) and the two-pass bounded-memory shuffle
(compclip.shardset.shuffle, `python -m datagen shuffle`): reproducible from the seed, different across
seeds, the captions of one image not next to each other, resumable after a kill in the same
order, a resume with another seed refused in one line, every sample exactly once."""
import json

import numpy as np
import pytest

from compclip.datagen.__main__ import main
from compclip.datagen.negatives.pipeline import run_generate
from compclip.shardset.order import OrderMismatch, permutation, shuffled, shuffled_order
from compclip.shardset.schema import ShardSample
from compclip.shardset.shards import ShardSetWriter, iter_raw_samples, read_image_ids, read_manifest, shard_urls
from compclip.shardset.shuffle import shuffle_shard_set
from compclip.datagen.world import write_object_bank
from compclip.datagen.images.stitch import write_stitched
from compclip.datagen.negatives.pipeline import GenerateOptions, run_generate
from tests.fixtures.faults import Killed, killed_after

TINY_JPEG = b"\xff\xd8\xff\xe0 not decoded by the shard writer or verify_shard_set"
WORDS = ["dog", "cat", "horse", "bus", "kite", "table", "plate", "train", "bird", "truck"]


def karpathy_json(path, images: int, per_image: int = 5):
    """A Karpathy-style file in Karpathy order: each image's captions together."""
    entries = []
    for i in range(images):
        a, b = WORDS[i % 10], WORDS[(i // 10) % 10]
        entries.append({"filepath": "val2014", "filename": f"COCO_val2014_{i:012d}.jpg", "cocoid": i,
                        "split": "train", "sentences": [
                            {"raw": f"A {a} next to a red {b} number {j}.", "sentid": i * per_image + j}
                            for j in range(per_image)]})
    path.write_text(json.dumps({"images": entries, "dataset": "coco"}))
    return path


def metas(directory):
    return [json.loads(raw["json"]) for url in shard_urls(directory) for raw in iter_raw_samples(url)]


def keys(directory):
    return [raw["__key__"] for url in shard_urls(directory) for raw in iter_raw_samples(url)]


def adjacent_same_image(image_ids) -> int:
    return sum(a == b for a, b in zip(image_ids, image_ids[1:]))


def test_permutation_is_reproducible_and_differs_across_seeds():
    a, b, c = permutation(1000, 3), permutation(1000, 3), permutation(1000, 4)
    assert sorted(a.tolist()) == list(range(1000))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert shuffled("abcdefgh", 3) == shuffled("abcdefgh", 3) != shuffled("abcdefgh", 5)


def test_captions_of_one_image_are_not_neighbours(tmp_path):
    src = karpathy_json(tmp_path / "dataset_coco.json", images=100)
    run_generate(src, tmp_path / "out", GenerateOptions(kinds=["swap"], seed=7, shard_size=120, progress=False))
    got = [m["image_id"] for m in metas(tmp_path / "out")]
    assert sorted(got) == sorted(i for i in range(100) for _ in range(5))  # every caption once
    in_order = [i for i in range(100) for _ in range(5)]
    assert adjacent_same_image(in_order) == 400  # the check sees Karpathy order's grouping
    # a random order of 500 captions, 5 per image, has 4 adjacent same-image pairs on average
    # (Poisson-like): 20 or more happens with probability < 1e-7
    assert adjacent_same_image(got) < 20
    manifest = read_manifest(tmp_path / "out")
    assert manifest["order"] == {"shuffled": True, "seed": 7}
    assert read_image_ids(tmp_path / "out") == set(range(100))  # image_ids.txt: the COCO ids
    other = tmp_path / "other"
    run_generate(src, other, GenerateOptions(kinds=["swap"], seed=8, shard_size=120, progress=False))
    assert keys(other) != keys(tmp_path / "out") and sorted(keys(other)) == sorted(keys(tmp_path / "out"))


def test_resume_after_a_kill_keeps_the_order(tmp_path):
    src = karpathy_json(tmp_path / "dataset_coco.json", images=20)
    run_generate(src, tmp_path / "full", GenerateOptions(kinds=["swap"], seed=1, shard_size=15, progress=False))
    with pytest.raises(Killed), killed_after(40):
        run_generate(src, tmp_path / "res", GenerateOptions(kinds=["swap"], seed=1, shard_size=15, progress=False))
    assert [s["samples"] for s in read_manifest(tmp_path / "res")["shards"]] == [15, 15]
    run_generate(src, tmp_path / "res", GenerateOptions(kinds=["swap"], seed=1, shard_size=15, progress=False))
    assert keys(tmp_path / "res") == keys(tmp_path / "full")
    full, res = read_manifest(tmp_path / "full"), read_manifest(tmp_path / "res")
    assert [s["sha256"] for s in res["shards"]] == [s["sha256"] for s in full["shards"]]


def test_a_resume_with_another_seed_is_refused_in_one_line(tmp_path, capsys):
    bank = tmp_path / "bank"
    write_object_bank(bank, 24, 0)
    out = tmp_path / "lr"
    with pytest.raises(Killed), killed_after(9):
        write_stitched(out, bank, 12, seed=0, size=(48, 48), max_count=4)
    part = read_manifest(out)
    assert part["order"] == shuffled_order(0) and len(part["shards"]) == 2
    assert [int(k[2:]) for k in keys(out)] == permutation(12, 0)[:8].tolist()
    with pytest.raises(OrderMismatch, match="shuffled with seed 0; this run asks for shuffled with seed 1"):
        write_stitched(out, bank, 12, seed=1, size=(48, 48), max_count=4)
    args = ["stitch", "--bank", str(bank), "--out", str(out), "--n", "12", "--canvas", "48",
            "--max-count", "4", "--seed", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "seed 0" in err[0]
    assert len(read_manifest(out)["shards"]) == 2  # nothing written lost
    assert main(args[:-1] + ["0"]) == 0  # the same seed resumes
    assert [int(k[2:]) for k in keys(out)] == permutation(12, 0).tolist()


def plain_set(directory, n: int, per_image: int = 3, shard_size: int = 25, carried=None):
    with ShardSetWriter(directory, max_count=shard_size, features={"demo": True}) as writer:
        if carried:
            writer.manifest.update(carried)
        for i in range(n):
            image_id = i // per_image
            writer.add(ShardSample(f"s{i:05d}", f"caption {i}", TINY_JPEG,
                                   meta={"source": "fixture", "image_id": image_id, "coco_id": image_id}))
    return directory


def test_two_pass_shuffle_keeps_every_sample_once_in_bounded_buckets(tmp_path):
    src = plain_set(tmp_path / "src", 600, carried={"excluded": {"visla": 2}})
    out = shuffle_shard_set(src, tmp_path / "a", seed=5, buckets=6, max_count=50, progress=False)
    got = keys(tmp_path / "a")
    assert sorted(got) == keys(src) and len(set(got)) == 600  # each sample exactly once
    assert got != keys(src)
    assert out["order"] == {"shuffled": True, "seed": 5, "method": "buckets", "buckets": 6,
                            "source": str(src)}
    # buckets hold ~100 each; the largest bounds memory. 200+ happens with probability < 1e-20
    assert out["shuffle"]["samples"] == 600 and out["shuffle"]["largest_bucket"] < 200
    assert out["excluded"] == {"visla": 2} and out["features"] == {"demo": True}  # carried over
    assert read_image_ids(tmp_path / "a") == set(range(200))
    assert not (tmp_path / "a" / ".shuffle").exists()  # the buckets are gone
    ids = [json.loads(r["json"])["image_id"] for u in shard_urls(tmp_path / "a") for r in iter_raw_samples(u)]
    assert adjacent_same_image(ids) < 15  # 2 expected from a random order; input order has 400
    # reproducible from the seed; another seed gives another order
    shuffle_shard_set(src, tmp_path / "b", seed=5, buckets=6, max_count=50, progress=False)
    assert [s["sha256"] for s in read_manifest(tmp_path / "b")["shards"]] == \
        [s["sha256"] for s in out["shards"]]
    shuffle_shard_set(src, tmp_path / "c", seed=6, buckets=6, max_count=50, progress=False)
    assert keys(tmp_path / "c") != got


def test_two_pass_shuffle_resumes_in_the_same_order_and_refuses_another_seed(tmp_path, capsys):
    src = plain_set(tmp_path / "src", 300)
    full = shuffle_shard_set(src, tmp_path / "full", seed=2, buckets=4, max_count=40, progress=False)
    with pytest.raises(Killed), killed_after(130):
        shuffle_shard_set(src, tmp_path / "res", seed=2, buckets=4, max_count=40, progress=False)
    part = read_manifest(tmp_path / "res")
    assert not part["complete"] and len(part["shards"]) == 3
    args = ["shuffle", "--src", str(src), "--out", str(tmp_path / "res"), "--buckets", "4",
            "--max-count", "40", "--quiet"]
    assert main(args + ["--seed", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed 2" in err[0] and "seed 3" in err[0]
    assert main(args + ["--seed", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified"]["samples"] == 300 and report["order"]["seed"] == 2
    assert [s["sha256"] for s in read_manifest(tmp_path / "res")["shards"]] == \
        [s["sha256"] for s in full["shards"]]


def test_shuffle_errors_are_one_line(tmp_path, capsys):
    src = tmp_path / "src"
    writer = ShardSetWriter(src, max_count=2)
    writer.add(ShardSample("a", "x"))
    writer.add(ShardSample("b", "y"))  # one complete shard, set not closed
    assert main(["shuffle", "--src", str(src), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not complete" in err[0]
    assert main(["shuffle", "--src", str(tmp_path / "nothing"), "--out", str(tmp_path / "out"),
                 "--quiet"]) == 2
    assert "nothing: no such folder" in capsys.readouterr().err
