"""compclip.shardset.tarblocks: headers, files and reads byte for byte as `tarfile` makes them."""
import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from compclip.shardset.shards import member_key
from compclip.shardset.tarblocks import TarWriter, iter_members, iter_spans, member_header, read_span

NAMES = ["s000001.jpg", "k.neg.json", "a" * 96 + ".txt", "d" * 20 + "/" + "b" * 90 + ".jpg",
         "café_ünïcode.txt", "bad\udcffbyte.txt", "", "x"]
SIZES = [0, 1, 511, 512, 513, 87_325, 8 ** 11 - 1]


def tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o444
    return info.tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape")


@pytest.mark.parametrize("name", NAMES)
def test_member_header_is_what_tarfile_writes(name):
    for size in SIZES:
        assert member_header(name, size) == tarfile_header(name, size), (name, size)


def test_members_are_read_only_with_time_and_owners_zero():
    info = tarfile.TarInfo.frombuf(member_header("k.txt", 9), tarfile.ENCODING, "surrogateescape")
    assert (info.name, info.size, info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname) \
        == ("k.txt", 9, 0o444, 0, 0, 0, "", "")
    assert info.isfile() and member_header("k.txt", 9)[257:265] == tarfile.POSIX_MAGIC


def test_what_tarfile_cannot_write_is_refused_as_tarfile_refuses_it():
    for name, size in (("x.jpg", 8 ** 11), ("y" * 97 + ".jpg", 1), ("d/" + "y" * 120 + ".jpg", 1)):
        with pytest.raises(ValueError) as theirs:
            tarfile_header(name, size)
        with pytest.raises(ValueError, match=str(theirs.value)):
            member_header(name, size)


MEMBERS = [("s1.jpg", b"\xff\xd8" * 700), ("s1.txt", b"a caption"), ("s1.json", b"{}"),
           ("s2.txt", b""), ("s2.neg.json", b"[]" * 256), ("café.txt", "é".encode())]


def tarfile_bytes(members, fmt=tarfile.USTAR_FORMAT, mode=0o444, end=True) -> bytes:
    """What tarfile writes for `members`; `end=False`: without the zero blocks that end it."""
    buffer = io.BytesIO()
    tar = tarfile.open(fileobj=buffer, mode="w", format=fmt)
    for name, value in members:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(value), 0, mode
        tar.addfile(info, io.BytesIO(value))
    body = buffer.getvalue()[:tar.offset]
    tar.close()
    return buffer.getvalue() if end else body


@pytest.mark.parametrize("members", [MEMBERS, MEMBERS[:1], []])
def test_tar_writer_writes_the_bytes_tarfile_writes_and_hashes_them(tmp_path, members):
    writer = TarWriter(tmp_path / "a.tar")
    for name, value in members:
        writer.add(name, value)
    size, sha256 = writer.close()
    data = (tmp_path / "a.tar").read_bytes()
    assert data == tarfile_bytes(members)
    assert (size, sha256) == (len(data), hashlib.sha256(data).hexdigest())
    unhashed = TarWriter(tmp_path / "b.tar", hashed=False)
    assert unhashed.close() == (tarfile.RECORDSIZE, None)


def tarfile_read(path):
    with tarfile.open(path, "r") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar if m.isfile()]


def foreign_tars(tmp_path):
    """Tars the fast path does not take, whole or from some member on."""
    tars = {
        # canonical members, then a pax header (long name), then canonical ones again
        "pax": tarfile_bytes(MEMBERS[:2], end=False)
        + tarfile_bytes([("p/" + "q" * 150 + ".txt", b"long"), *MEMBERS[2:]], tarfile.PAX_FORMAT),
        "gnu": tarfile_bytes([MEMBERS[0], ("g" * 130 + ".txt", b"gnu long name")], tarfile.GNU_FORMAT),
        "mode": tarfile_bytes(MEMBERS, mode=0o644),
        "gzip": gzip.compress(tarfile_bytes(MEMBERS)),
        "no_end": tarfile_bytes(MEMBERS, end=False),
        "empty": tarfile_bytes([]),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("folder")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    tars["folder"] = tarfile_bytes(MEMBERS[:1], end=False) + buffer.getvalue()
    for name, data in tars.items():
        (tmp_path / f"{name}.tar").write_bytes(data)
    return [tmp_path / f"{name}.tar" for name in tars]


def test_members_are_read_as_tarfile_reads_them(tmp_path):
    canonical = tmp_path / "canonical.tar"
    canonical.write_bytes(tarfile_bytes(MEMBERS))
    for path in [canonical, *foreign_tars(tmp_path)]:
        theirs = tarfile_read(path)
        assert list(iter_members(path)) == theirs, path.name
        assert list(iter_members(path, payloads=False)) == [(n, None) for n, _ in theirs], path.name
    assert [n for n, _ in tarfile_read(tmp_path / "pax.tar")][2].startswith("p/qqq")


def test_a_truncated_member_is_an_error_as_in_tarfile(tmp_path):
    path = tmp_path / "cut.tar"
    path.write_bytes(tarfile_bytes(MEMBERS)[:512 + 100])
    with pytest.raises(tarfile.ReadError):
        tarfile_read(path)
    with pytest.raises(tarfile.ReadError, match="cut.tar: unexpected end of data in member 's1.jpg'"):
        list(iter_members(path))


def test_spans_delimit_each_member_and_read_back_in_any_order(tmp_path):
    members = MEMBERS + [("d" * 20 + "/" + "b" * 90 + ".jpg", b"long name, USTAR prefix")]
    path = tmp_path / "w.tar"
    writer = TarWriter(path)
    for name, value in members:
        writer.add(name, value)
    writer.close()
    spans = list(iter_spans(path))
    assert [name for name, _, _ in spans] == [name for name, _ in members]
    with open(path, "rb") as f:
        for i in reversed(range(len(spans))):  # random access, one member at a time
            _, start, size = spans[i]
            assert read_span(f, start, start + size) == [members[i]]
        _, first, _ = spans[0]
        _, third, size = spans[2]
        assert read_span(f, first, third + size) == members[:3]  # a sample's members, one read
        with pytest.raises(tarfile.ReadError, match="w.tar: ends before byte"):
            read_span(f, third, path.stat().st_size + 1)


def test_spans_refuse_a_file_tar_writer_did_not_write(tmp_path):
    foreign = tmp_path / "foreign.tar"
    foreign.write_bytes(tarfile_bytes(MEMBERS[:2], mode=0o644))
    with pytest.raises(tarfile.ReadError, match="foreign.tar: no header as TarWriter writes it at byte 0"):
        list(iter_spans(foreign))
    cut = tmp_path / "cut.tar"
    cut.write_bytes(tarfile_bytes(MEMBERS[:2], end=False))
    with pytest.raises(tarfile.ReadError, match="cut.tar: no header as TarWriter writes it at byte 3072"):
        list(iter_spans(cut))


@pytest.mark.parametrize("name", ["k.jpg", "k.neg.json", "a/b/k.partner.txt", "k", "dir/", "a/.", ".", "", "a//k.x"])
def test_member_key_splits_as_pathlib_does(name):
    key, _, ext = Path(name).name.partition(".")
    assert member_key(name) == (key, ext)
