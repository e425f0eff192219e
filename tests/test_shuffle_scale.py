"""`datagen shuffle` (compclip.shardset.shuffle) at scale: the output is byte for byte what the
tarfile-based pass 1 and the in-memory pass 2 wrote, the Python-level peak memory stays flat when
the set grows 4x (with the bucket size kept the same, or the number of buckets), a text-only set (what `negatives generate` writes) shuffles, and
the command makes no `tarfile` header object per member and reads back the output's headers, not
its payloads."""
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from compclip.datagen.__main__ import main
from compclip.shardset import shuffle as shuffle_mod
from compclip.shardset.order import rng
from compclip.shardset.schema import Negative, SchemaError, ShardSample
from compclip.shardset.shards import ShardSetWriter, iter_raw_samples, read_manifest, shard_urls
from compclip.shardset.shuffle import check_output, shuffle_shard_set

ROOT = Path(__file__).resolve().parents[1]
TINY_JPEG = b"\xff\xd8\xff\xe0 not decoded by the shard writer"


def tiny_set(directory, n: int, images: bool = True, shard_size: int = 500):
    with ShardSetWriter(directory, max_count=shard_size) as writer:
        for i in range(n):
            writer.add(ShardSample(f"s{i:06d}", f"caption {i}", TINY_JPEG if images else None,
                                   meta={"source": "fixture", "n": i}))
    return directory


def old_scatter(src, work, seed, buckets, progress=True):
    """Pass 1 as it was before: one `tarfile.TarFile` per bucket (kept here as the reference)."""
    work.mkdir(parents=True, exist_ok=True)
    draw = rng(seed, "shuffle-buckets")
    tars = [tarfile.open(work / f"bucket-{b:05d}.tar", "w", format=tarfile.USTAR_FORMAT)
            for b in range(buckets)]
    counts = [0] * buckets
    for url in shard_urls(src):
        for raw in iter_raw_samples(url):
            b = int(draw.integers(buckets))
            for member, value in raw.items():
                if member.startswith("__"):
                    continue
                info = tarfile.TarInfo(f"{raw['__key__']}.{member}")
                info.size, info.mtime = len(value), 0
                tars[b].addfile(info, io.BytesIO(value))
            counts[b] += 1
    for tar in tars:
        tar.close()
    return counts


def old_bucket_in_order(path, order):
    """Pass 2's read as it was before: the whole bucket in memory, then indexed."""
    samples = list(iter_raw_samples(path))
    assert len(samples) == len(order)
    return (samples[int(i)] for i in order)


def shard_hashes(directory):
    return [s["sha256"] for s in read_manifest(directory)["shards"]]


def test_output_is_byte_identical_to_the_tarfile_pass_1_and_the_in_memory_pass_2(tmp_path, monkeypatch):
    src = tiny_set(tmp_path / "src", 700, shard_size=90)
    new = shuffle_shard_set(src, tmp_path / "new", seed=3, buckets=5, max_count=60, progress=False)
    monkeypatch.setattr(shuffle_mod, "scatter", old_scatter)
    monkeypatch.setattr(shuffle_mod, "bucket_in_order", old_bucket_in_order)
    old = shuffle_shard_set(src, tmp_path / "old", seed=3, buckets=5, max_count=60, progress=False)
    assert len(new["shards"]) == 12 and shard_hashes(tmp_path / "new") == shard_hashes(tmp_path / "old")


PEAK = """
import sys, tracemalloc
from compclip.shardset.shuffle import check_output, shuffle_shard_set
tracemalloc.start()
shuffle_shard_set(sys.argv[1], sys.argv[2], seed=0, buckets=int(sys.argv[3]), progress=False)
print(tracemalloc.get_traced_memory()[1])
"""


def peak_bytes(src, out, buckets: int) -> int:
    done = subprocess.run([sys.executable, "-c", PEAK, str(src), str(out), str(buckets)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def test_peak_memory_stays_flat_at_4x_the_samples(tmp_path):
    # the same bucket size (1,000 samples) at both sizes: memory holds one bucket, whatever the set
    small = peak_bytes(tiny_set(tmp_path / "s", 4_000), tmp_path / "s_out", 4)
    large = peak_bytes(tiny_set(tmp_path / "l", 16_000), tmp_path / "l_out", 16)
    print(f"peak: {small / 1e6:.2f} MB at 4,000 samples, {large / 1e6:.2f} MB at 16,000")
    assert large <= 1.2 * small, (small, large)


def test_peak_memory_stays_flat_when_each_bucket_holds_4x_the_samples(tmp_path):
    # pass 2 reads a bucket's samples one at a time, keeping two offsets per sample, not the bucket
    small = peak_bytes(tiny_set(tmp_path / "s", 4_000, shard_size=2_000), tmp_path / "s_out", 2)
    large = peak_bytes(tiny_set(tmp_path / "l", 16_000, shard_size=2_000), tmp_path / "l_out", 2)
    print(f"peak: {small / 1e6:.2f} MB at 2,000 samples a bucket, {large / 1e6:.2f} MB at 8,000")
    assert large <= 1.2 * small, (small, large)


def test_a_text_only_set_shuffles(tmp_path, capsys):
    src = tiny_set(tmp_path / "src", 120, images=False, shard_size=40)
    out = tmp_path / "out"
    assert main(["shuffle", "--src", str(src), "--out", str(out), "--buckets", "3", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verified"] == {"samples": 120, "shards": 1}
    got = [raw["__key__"] for url in shard_urls(out) for raw in iter_raw_samples(url)]
    assert sorted(got) == [f"s{i:06d}" for i in range(120)] and got != sorted(got)
    assert all(set(raw) == {"__key__", "__url__", "txt", "json"}
               for url in shard_urls(out) for raw in iter_raw_samples(url))


class CountedReads:
    """A file whose payload reads are counted: the bytes each `read` call returns."""

    def __init__(self, file, counts):
        self._file, self._counts = file, counts

    def read(self, *args):
        data = self._file.read(*args)
        self._counts[self._file.name] = self._counts.get(self._file.name, 0) + len(data)
        return data

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __iter__(self):
        return iter(self.read, b"")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


def test_the_command_copies_members_without_tarfile_and_reads_back_headers_alone(tmp_path, monkeypatch, capsys):
    src, out = tiny_set(tmp_path / "src", 300, shard_size=100), tmp_path / "out"
    calls = {"frombuf": 0, "tobuf": 0}
    frombuf, tobuf = tarfile.TarInfo.frombuf.__func__, tarfile.TarInfo.tobuf

    def counted_frombuf(cls, *args, **kwargs):
        calls["frombuf"] += 1
        return frombuf(cls, *args, **kwargs)

    def counted_tobuf(self, *args, **kwargs):
        calls["tobuf"] += 1
        return tobuf(self, *args, **kwargs)

    reads: dict[str, int] = {}
    real_open = open

    def counted_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        path = Path(str(file))
        if "r" in mode and path.parent == out and path.suffix == ".tar":  # an output shard read back
            return CountedReads(handle, reads)
        return handle

    monkeypatch.setattr(tarfile.TarInfo, "frombuf", classmethod(counted_frombuf))
    monkeypatch.setattr(tarfile.TarInfo, "tobuf", counted_tobuf)
    monkeypatch.setattr("builtins.open", counted_open)
    monkeypatch.setattr(tarfile, "bltn_open", counted_open)
    assert main(["shuffle", "--src", str(src), "--out", str(out), "--buckets", "3", "--max-count", "120",
                 "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["verified"] == {"samples": 300, "shards": 3}
    assert calls == {"frombuf": 0, "tobuf": 0}  # headers checked and made without tarfile's objects
    read_back = dict(reads)
    monkeypatch.undo()
    shards = sorted(out.glob("shard-*.tar"))
    members = {path: sum(1 for _ in tarfile.open(path)) for path in shards}
    # the final check read each header (and the zero block that ends the shard), no payload
    assert read_back == {str(path): 512 * (members[path] + 1) for path in shards}


def test_pass_2_counts_negatives_and_coco_ids_of_the_samples_it_copies(tmp_path):
    src = tmp_path / "src"
    with ShardSetWriter(src, max_count=40, features={"negatives": True}) as writer:
        for i in range(100):
            negatives = [Negative(f"not caption {i} {j}", "swap", "obj") for j in range(i % 3)]
            writer.add(ShardSample(f"s{i:06d}", f"caption {i}", TINY_JPEG, negatives=negatives,
                                   meta={"source": "fixture", "image_id": i, "coco_id": 1000 + i // 2}))
    out = shuffle_shard_set(src, tmp_path / "out", seed=1, buckets=3, max_count=30, progress=False)
    counted = {k: v for k, v in out["negatives_per_sample"].items() if k != "shards_counted"}
    assert counted == {k: v for k, v in read_manifest(src)["negatives_per_sample"].items() if k != "shards_counted"}
    assert counted["histogram"] == {"0": 34, "1": 33, "2": 33}
    assert (tmp_path / "out" / "image_ids.txt").read_text() == (src / "image_ids.txt").read_text()
    assert len((src / "image_ids.txt").read_text().split()) == 50


def test_the_final_check_names_a_shard_whose_size_differs_from_the_manifest(tmp_path):
    shuffle_shard_set(tiny_set(tmp_path / "src", 50), tmp_path / "out", buckets=2, max_count=20, progress=False)
    assert check_output(tmp_path / "out") == {"samples": 50, "shards": 3}
    shard = tmp_path / "out" / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[:-512])
    with pytest.raises(SchemaError, match=r"shard-000001.tar: \d+ bytes, the manifest says \d+"):
        check_output(tmp_path / "out")
