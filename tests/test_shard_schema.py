"""Shard schema: samples round-trip, bad samples are named, shard sets resume and verify."""
import io

import pytest
import webdataset as wds
from PIL import Image

from compclip.shardset.schema import Negative, Neighbour, Partner, SchemaError, ShardSample
from compclip.shardset.shards import KeyIndex, ShardSetWriter, iter_raw_samples, shard_urls, verify_shard_set


def jpeg(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), color).save(buf, format="JPEG")
    return buf.getvalue()


def sample(i: int) -> ShardSample:
    return ShardSample(
        key=f"s{i:05d}", caption=f"a red circle number {i}", image=jpeg((i % 255, 0, 0)),
        meta={"source": "test", "i": i},
        negatives=[Negative("a circle red number", "swap", "att", "rules"),
                   Negative("a blue circle", "replace", "att", "rules")],
        partner=Partner(image=jpeg((0, 0, 255)), caption="a blue circle", kind="generated",
                        negative_index=1),
        neighbours=[Neighbour("s00001", 0.9), Neighbour("s00002", 0.8)])


def test_sample_round_trips_through_members():
    original = sample(3)
    raw = original.to_wds()
    assert {"jpg", "txt", "json", "neg.json", "partner.jpg", "partner.txt", "partner.json",
            "nn.json"} <= set(raw)
    assert ShardSample.from_wds(raw) == original


@pytest.mark.parametrize("drop, message", [("txt", "missing member 'txt'"),
                                           ("jpg", "missing image member"),
                                           ("partner.txt", "partner image without")])
def test_incomplete_sample_names_key_and_member(drop, message):
    raw = sample(1).to_wds()
    del raw[drop]
    with pytest.raises(SchemaError, match=f"sample 's00001'.*{message}"):
        ShardSample.from_wds(raw)


def test_bad_negative_labels_are_rejected():
    with pytest.raises(SchemaError, match="sub-kind 'rel' is not valid for kind 'add'"):
        Negative("x", "add", "rel")
    raw = sample(1).to_wds()
    raw["neg.json"] = b'[{"text": "x", "kind": "shuffle", "subkind": "obj"}]'
    with pytest.raises(SchemaError, match="s00001.*kind 'shuffle'"):
        ShardSample.from_wds(raw)


def test_writer_limits_shards_and_verifies(tmp_path):
    with ShardSetWriter(tmp_path, max_count=4, features={"negatives": True}) as writer:
        for i in range(10):
            writer.add(sample(i))
        writer.skip("corrupt image")
    manifest = writer.manifest
    assert [s["samples"] for s in manifest["shards"]] == [4, 4, 2]
    assert manifest["shards"][-1]["skipped"] == {"corrupt image": 1} and manifest["complete"]
    totals = verify_shard_set(tmp_path)
    assert totals == {"samples": 10, "shards": 3, "negatives": 20, "partners": 10,
                      "with_neighbours": 10}


def test_open_clip_style_reader_sees_plain_jpg_txt(tmp_path):
    with ShardSetWriter(tmp_path, max_count=4) as writer:
        for i in range(5):
            writer.add(sample(i))
    pipeline = wds.WebDataset(shard_urls(tmp_path), shardshuffle=False).decode("pil").to_tuple("jpg", "txt")
    pairs = list(pipeline)
    assert len(pairs) == 5 and pairs[0][1] == "a red circle number 0"
    assert pairs[0][0].size == (16, 16)


def test_resume_after_kill_gives_identical_shards(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    with ShardSetWriter(full, max_count=3) as writer:
        for i in range(10):
            writer.add(sample(i))
    writer = ShardSetWriter(cut, max_count=3)
    for i in range(7):  # dies in the middle of the third shard
        writer.add(sample(i))
    del writer
    resumed = ShardSetWriter(cut, max_count=3)
    assert resumed.inputs_done == 6
    for i in range(resumed.inputs_done, 10):
        resumed.add(sample(i))
    resumed.close()
    assert [s["sha256"] for s in resumed.manifest["shards"]] == \
        [s["sha256"] for s in writer_manifest(full)["shards"]]
    assert not list(cut.glob(".*.tmp"))


def writer_manifest(path):
    from compclip.shardset.shards import read_manifest
    return read_manifest(path)


def test_verify_catches_a_corrupted_shard(tmp_path):
    with ShardSetWriter(tmp_path, max_count=4) as writer:
        for i in range(4):
            writer.add(sample(i))
    shard = tmp_path / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(SchemaError, match="shard-000000.tar: sha256 differs"):
        verify_shard_set(tmp_path)


def test_key_index_reads_any_member_by_key(tmp_path):
    with ShardSetWriter(tmp_path, max_count=3) as writer:
        for i in range(7):
            writer.add(sample(i))
    KeyIndex.build(tmp_path)
    index = KeyIndex(tmp_path)
    assert "s00005" in index and "nope" not in index
    assert index.read("s00005", "jpg") == sample(5).image
    assert index.read("s00005", "txt") == b"a red circle number 5"
    with pytest.raises(KeyError, match="no member 'png' for key 's00005'"):
        index.read("s00005", "png")
    assert len(list(iter_raw_samples(tmp_path / "shard-000002.tar"))) == 1
