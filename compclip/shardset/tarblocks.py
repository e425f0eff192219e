"""Tar members written and read block by block, byte for byte as `tarfile` writes and reads them,
without its per-member objects (the shard writer, the shard reader and the shuffle's buckets).

`member_header(name, size)` is the 512-byte USTAR header `tarfile` writes for a regular file of
that name and size with mode 0o444 and mtime 0 (what `ShardSetWriter` writes), spliced into a
template `tarfile` made once, so it costs a few string operations instead of `TarInfo.tobuf`
(names longer than 100 bytes and sizes of 8 GiB or more go through `tarfile` itself).
`TarWriter` appends members (header, payload, zero padding to 512 bytes), ends the file as
`tarfile` does (two zero blocks, then zeros up to a multiple of 10240 bytes) and hashes the bytes
as it writes them (sha256), so the file is not read back to hash it. `iter_members` reads
members back: a header identical to `member_header(name, size)` is taken as it is; from the
first one that is not (another mode, a pax or GNU extension, a damaged block), the rest of the
file is read by `tarfile`, so what it yields is what `tarfile` would (`tests/test_tarblocks.py`).
`iter_spans` lists where each member of a file `TarWriter` wrote lies, from its headers alone, and
`read_span` reads the members of one such byte range back (the shuffle's random-order reads).
"""
from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

BLOCK, RECORD = tarfile.BLOCKSIZE, tarfile.RECORDSIZE
ZERO_BLOCK = bytes(BLOCK)
MODE = 0o444  # read-only members; with mtime 0 the bytes depend on the content alone
ENCODING, ERRORS = tarfile.ENCODING, "surrogateescape"  # what tarfile.open(path, "w") uses


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, MODE
    return info.tobuf(tarfile.USTAR_FORMAT, ENCODING, ERRORS)


_TEMPLATE = _tarfile_header("", 0)
_MID, _TIME, _TAIL = _TEMPLATE[100:124], _TEMPLATE[136:148], _TEMPLATE[156:]  # mode..gid, mtime, type..
_FIXED_SUM = 256 + sum(_MID) + sum(_TIME) + sum(_TAIL)  # checksum of the fields every member shares
_MAX_SIZE = 8 ** 11  # USTAR's 11 octal digits


def member_header(name: str, size: int) -> bytes:
    """The header `tarfile` writes (USTAR) for a regular file `name` of `size` bytes, mode 0o444,
    mtime 0."""
    raw = name.encode(ENCODING, ERRORS)
    if len(raw) > 100 or not 0 <= size < _MAX_SIZE:
        return _tarfile_header(name, size)  # prefix split, or tarfile's error
    size_field = b"%011o\0" % size
    checksum = _FIXED_SUM + sum(raw) + sum(size_field)
    return b"".join((raw, bytes(100 - len(raw)), _MID, size_field, _TIME, b"%06o\0 " % checksum, _TAIL))


class TarWriter:
    """A tar file written member by member with nothing kept per member; `close` returns its
    size and, with `hashed`, its sha256 (else None)."""

    def __init__(self, path: str | Path, hashed: bool = True):
        self.file: BinaryIO = open(path, "wb")
        self.size = 0
        self._hash = hashlib.sha256() if hashed else None

    def add(self, name: str, value: bytes) -> None:
        pad = -len(value) % BLOCK
        parts = (member_header(name, len(value)), value, bytes(pad))
        self.file.writelines(parts)
        if self._hash is not None:
            for part in parts:
                self._hash.update(part)
        self.size += BLOCK + len(value) + pad

    def close(self) -> tuple[int, Optional[str]]:
        """End the file as `tarfile` does; returns (bytes, sha256 hex digest or None)."""
        if not self.file.closed:
            try:
                end = bytes(2 * BLOCK + -(self.size + 2 * BLOCK) % RECORD)
                self.file.write(end)
                if self._hash is not None:
                    self._hash.update(end)
                self.size += len(end)
            finally:
                self.file.close()
        return self.size, self._hash.hexdigest() if self._hash is not None else None


def iter_members(path: str | Path, payloads: bool = True) -> Iterator[tuple[str, Optional[bytes]]]:
    """(name, payload) of each regular file member of the tar file `path`, in order, as
    `tarfile` reads them; with `payloads=False` the payloads are skipped, not read (None)."""
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(BLOCK)
            if header == ZERO_BLOCK:
                return
            found = _canonical(header)
            if found is None:
                yield from _tarfile_members(path, f, offset, payloads)
                return
            name, size = found
            pad = -size % BLOCK
            if payloads:
                value = f.read(size)
                if len(value) < size:
                    raise tarfile.ReadError(f"{path}: unexpected end of data in member '{name}'")
                if pad:
                    f.seek(pad, 1)
            else:
                value = None
                f.seek(size + pad, 1)
            offset += BLOCK + size + pad
            yield name, value


def _tarfile_members(path: str | Path, f: BinaryIO, offset: int,
                     payloads: bool) -> Iterator[tuple[str, Optional[bytes]]]:
    """The rest of a tar file from `offset` on, read by `tarfile` (the whole file by path, so a
    compressed one is opened as `tarfile.open` opens it)."""
    if offset == 0:
        tar = tarfile.open(path, "r")
    else:
        f.seek(offset)
        tar = tarfile.open(fileobj=f, mode="r:")
    with tar:
        for member in tar:
            if member.isfile():
                yield member.name, tar.extractfile(member).read() if payloads else None


def _name_size(header: bytes) -> tuple[str, int]:
    """Name (USTAR prefix included) and size of a header `member_header` writes; ("", -1) if none."""
    raw, prefix = header[:100].split(b"\0", 1)[0], header[345:500].split(b"\0", 1)[0]
    try:
        size = int(header[124:135], 8)
    except ValueError:
        return "", -1
    return (prefix + b"/" + raw if prefix else raw).decode(ENCODING, ERRORS), size


def _canonical(header: bytes) -> Optional[tuple[str, int]]:
    """(name, size) of a block identical to the header `member_header` writes for them, else None."""
    name, size = _name_size(header)
    if len(header) < BLOCK or size < 0 or header != member_header(name, size):
        return None
    return name, size


def iter_spans(path: str | Path) -> Iterator[tuple[str, int, int]]:
    """(name, offset of its header, bytes up to the next header) of each member of a tar file
    `TarWriter` wrote, from the headers alone (payloads are skipped, not read); any other header
    raises `tarfile.ReadError` naming the file and offset."""
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(BLOCK)
            if header == ZERO_BLOCK:
                return
            found = _canonical(header)
            if found is None:
                raise tarfile.ReadError(f"{path}: no header as TarWriter writes it at byte {offset}")
            name, size = found
            span = BLOCK + size + -size % BLOCK
            f.seek(offset + span)
            yield name, offset, span
            offset += span


def read_span(f: BinaryIO, start: int, end: int) -> list[tuple[str, bytes]]:
    """(name, payload) of the members whose headers and payloads fill bytes [start, end) of the
    open tar file `f` (a range `iter_spans` delimits)."""
    f.seek(start)
    data, members, at = f.read(end - start), [], 0
    if len(data) != end - start:
        raise tarfile.ReadError(f"{getattr(f, 'name', f)}: ends before byte {end}")
    while at < len(data):
        name, size = _name_size(data[at:at + BLOCK])
        members.append((name, data[at + BLOCK:at + BLOCK + size]))
        at += BLOCK + size + -size % BLOCK
    return members
