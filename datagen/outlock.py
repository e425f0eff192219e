"""One writer per output folder: the lock every datagen writer takes on its `--out`.

    with hold(out):          # raises InputError (exit 2) naming the holder if another run writes there
        ...write...

The lock is `compclip.runlock`'s (`<out>/run.lock`, JSON naming pid, host and start time, created
with O_EXCL), taken before the first write into the folder and removed when the block ends,
however it ends. A lock whose process is provably gone (a killed run on this host) is taken over
with a note on stderr; a live one makes the second writer stop with one line naming the holder,
before it writes anything. Holding is re-entrant within a process: a command that takes the lock
and then calls a library writer that takes it again (`prepare coco` -> `run_generate`) holds it
once, released by the outer block.

Who takes it: the `python -m datagen` commands where they record their options (`pin` in
datagen/__main__.py: stitch, knn, genimages, prepare coco|trohn|cocobank, shuffle), the
negatives pipeline (`run_generate`: `negatives generate` and stage 1 of `prepare coco`) and
`world build`. `compclip.runlock` imports nothing heavy.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Iterator

from compclip.cli import InputError, note
from compclip import runlock

_HELD: dict[Path, int] = {}  # output folders this process holds -> depth of nested holds


def _holder(lock: Path) -> str:
    """`pid P on HOST, started T` of a lock file, as far as it can be read."""
    try:
        info = json.loads(lock.read_text())
        text = f"pid {info['pid']} on {info['host']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "an unknown process"
    started = info.get("started")
    if isinstance(started, (int, float)):
        text += ", started " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    return text


@contextlib.contextmanager
def hold(out: str | Path) -> Iterator[None]:
    """Hold the lock of the output folder `out` (created if missing) for the block."""
    key = Path(out).resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    try:
        path = runlock.acquire(Path(out), note=note)
    except runlock.RunLocked:
        lock = Path(out) / getattr(runlock, "LOCK_NAME", "run.lock")
        raise InputError(f"{out}: another run is writing this output ({_holder(lock)}; lock file "
                         f"{lock}); wait for it to end or write to a new --out; if that run is "
                         f"dead, delete {lock}") from None
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        runlock.release(path)
