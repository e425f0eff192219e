"""Files written whole or not at all, with the mode a plain `open()` gives.

    atomic_write(path, lambda f: json.dump(data, f), mode="w")   # temp file, fsync, rename
    default_mode()                                                # 0666 less the umask

Used by every package that writes files others read (checkpoints, manifests, sample indexes,
checksum records, downloads); it imports nothing but the standard library.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status; elsewhere set and
    restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(executable: bool = False) -> int:
    """The mode `open()` gives a new file (0666, or 0777 for an executable, less the umask)."""
    return (0o777 if executable else 0o666) & ~current_umask()


def atomic_write(path: str | Path, write: Callable[[Any], None], mode: str = "wb") -> Path:
    """Write `path` through `write(fileobj)` into a temporary file, fsync, then rename. The file gets
    the mode `open()` would give it (`default_mode`), not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as handle:
            os.fchmod(handle.fileno(), default_mode())
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
