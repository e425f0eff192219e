"""One run per run folder: `<run_dir>/run.lock` names the process that trains there.

The lock file holds JSON `{"pid", "host", "started", "slurm_job"}` and is created with O_EXCL by
the main process (global rank 0) before anything in the folder changes. A second run in the same
folder is refused with one line naming the holder. A lock left behind by a run that died (a
SIGKILL, a node crash) is taken over with a note when its owner is provably gone: a process of
this host whose pid no longer runs (or runs a different, later-started program), the same SLURM
job (a requeued job starts on any node), or, for a process itself under SLURM (`SLURM_JOB_ID`
set), another SLURM job that SLURM says is no longer running (`slurm_job_state`: squeue no longer
lists it, or lists it as ended). A lock of another host is otherwise never guessed stale (nor when
squeue cannot be asked): the message says to remove the file once that run is known to be dead.
The lock is removed when the run ends, whatever the outcome. A lock of this very process (a second
`Trainer` built in one process, as tests do) is simply taken again.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

from compclip.errors import CompclipError

LOCK_NAME = "run.lock"
# squeue's states of a job whose processes are gone; any other (RUNNING, COMPLETING, PENDING,
# SUSPENDED, REQUEUED, ...) may still touch the run folder or be about to
ENDED_STATES = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "TIMEOUT"}


class RunLocked(CompclipError):
    """Another live run holds the folder (bad input: exit 2)."""


def _now_text(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t))


def _process_started(pid: int) -> Optional[float]:
    try:
        import psutil
        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 -- psutil missing, or no such process
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read(path: Path) -> Optional[dict]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return {}  # torn or unreadable: treated as a lock of unknown owner


def describe(info: dict) -> str:
    started = info.get("started")
    when = _now_text(started) if isinstance(started, (int, float)) else "an unknown time"
    job = f", SLURM job {info['slurm_job']}" if info.get("slurm_job") else ""
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {when}{job}"


def slurm_job_state(job: str) -> Optional[str]:
    """SLURM's state of job `job` as `squeue -h -j JOB -o %T` prints it ("RUNNING", "COMPLETED",
    ...); "" when SLURM no longer knows the job (squeue: invalid job id); None when SLURM cannot be
    asked (no squeue, or it failed otherwise)."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return "" if "invalid job id" in out.stderr.lower() else None
    states = out.stdout.split()
    return states[0].upper() if states else ""


def _other_slurm_job_ended(info: dict) -> Optional[str]:
    """For a process under SLURM: why the lock's (other) SLURM job is known to have ended, or None."""
    job = info.get("slurm_job")
    if not os.environ.get("SLURM_JOB_ID") or not job:
        return None
    state = slurm_job_state(str(job))
    if state == "":
        return f"SLURM job {job} no longer runs (squeue no longer lists it)"
    if state in ENDED_STATES:
        return f"SLURM job {job} no longer runs (squeue: {state})"
    return None


def stale_reason(info: dict) -> Optional[str]:
    """Why a lock's owner is known to be gone, or None when it may still run."""
    job = os.environ.get("SLURM_JOB_ID")
    if job and info.get("slurm_job") == job and info.get("pid") != os.getpid():
        return f"it is this SLURM job's ({job}) earlier attempt"
    if info.get("host") != socket.gethostname():
        return _other_slurm_job_ended(info)
    pid = info.get("pid")
    if not isinstance(pid, int):
        return None
    if pid == os.getpid():
        return None
    if not _alive(pid):
        return "its process no longer runs"
    started, recorded = _process_started(pid), info.get("started")
    if started is not None and isinstance(recorded, (int, float)) and started > recorded + 2:
        return "its pid now belongs to a later process"
    return None


def check(run_dir: Path) -> None:
    """Raise RunLocked if a live run holds `run_dir` (does not take the lock; pre-flight)."""
    path = Path(run_dir) / LOCK_NAME
    info = read(path)
    if info is None or stale_reason(info) or (info.get("pid") == os.getpid() and info.get("host") == socket.gethostname()):
        return
    raise RunLocked(f"{run_dir} is in use by another run ({describe(info)}; lock file {path}); wait for it to "
                    f"end, or choose another logging.run_name; if that run is dead, delete {path}")


def acquire(run_dir: Path, note=None) -> Path:
    """Take the lock of `run_dir` (creating the folder); raise RunLocked naming the holder."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
            "slurm_job": os.environ.get("SLURM_JOB_ID")}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            info = read(path)
            if info is None:
                continue  # released meanwhile: try again
            if info.get("pid") == os.getpid() and info.get("host") == socket.gethostname():
                path.unlink(missing_ok=True)  # this process's own (a Trainer built again in one process)
                continue
            reason = stale_reason(info)
            if reason is None:
                check(run_dir)  # raises with the holder named
                continue
            if note:
                note(f"taking over the lock {path} of a dead run ({describe(info)}): {reason}")
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(mine, handle)
        return path
    raise RunLocked(f"{path}: could not take the run folder's lock (another run keeps taking it); "
                    f"make sure one run at a time uses {run_dir}")


def release(path: Optional[Path]) -> None:
    """Remove the lock if this process still holds it."""
    if path is None:
        return
    info = read(Path(path))
    if info and info.get("pid") == os.getpid() and info.get("host") == socket.gethostname():
        Path(path).unlink(missing_ok=True)
