"""SIGTERM and SIGUSR1 ask a training run to stop with a checkpoint (what SLURM sends before a
preemption or the end of a job's time).

`install()` (called by `trainer/train.py` before the `Trainer` is built) replaces the default
action of both signals, which ends the process at once, with a handler that only records the
signal; the training loop reads it with `received()` at every step boundary, where the ranks agree
on it (`trainer.loop.Trainer.stop_agreed`), write a checkpoint and stop. `restore()` puts the
previous handlers back. DataLoader workers ignore both signals (`ignore_in_worker`, their
`worker_init_fn`: torch's own SIGTERM handler in a worker would end it), so a signal sent to a
whole process group or job step leaves the main process to act on it; it ends its workers itself.

A run stopped so exits with `EXIT_STOPPED` (75, `EX_TEMPFAIL` of sysexits.h: a temporary failure,
run again): distinct from done (0), bad input (2), a fault (3), Ctrl-C (130) and a kill by
SIGTERM before the handler existed (143).
"""
from __future__ import annotations

import signal

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
EXIT_STOPPED = 75

_received = 0  # the first stop signal received since install(); 0: none


def _record(signum, _frame) -> None:
    global _received
    _received = _received or signum


def install() -> dict:
    """Record SIGTERM / SIGUSR1 instead of dying; returns the handlers replaced (for `restore`)."""
    global _received
    _received = 0
    return {sig: signal.signal(sig, _record) for sig in SIGNALS}


def restore(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def ignore_in_worker(_worker_id: int = 0) -> None:
    """A DataLoader worker's `worker_init_fn`: ignore SIGTERM and SIGUSR1."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def received() -> int:
    """The number of the stop signal this process received since `install()`, or 0."""
    return _received


def name(signum: int) -> str:
    return signal.Signals(signum).name
