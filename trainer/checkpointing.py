"""Checkpoints for use (open_clip-loadable weights) and for resume (the whole training state).

A checkpoint `step-0000120` in `<run_dir>/checkpoints/` is:

    step-0000120.pt, step-0000120.json   `models.save_checkpoint`: weights + CheckpointMeta sidecar
    step-0000120.state/                  `accelerator.save_state`: model, optimiser, scheduler,
                                         grad scaler, RNG of every rank, and `TrainState`
                                         (step, epoch, data position of every rank's streams)
    latest, best                         pointer files (a checkpoint's .pt name)

The state folder is written under a temporary name and renamed when every rank is done; then
the weights and sidecar are written atomically and only then the pointers move, so a kill at any
moment leaves `latest` naming a complete checkpoint. An epoch's checkpoint is written before its
evaluation; `record_metrics` then puts the metrics into its sidecar and moves `best`, and a
resumed run reads them back from the sidecars (`recorded_metrics`). The last `keep_last` checkpoints are kept,
plus the one `best` names.

Faults: before writing, the free space is compared with the size of the last checkpoint; a write
that fails for want of space (ENOSPC anywhere in the error's chain, or a failed write with the disk
nearly full: torch's own message never says so) becomes `RunFault("no space left on device writing
<path>")`, the half-written state is removed and the pointers stay on the previous checkpoint.
On resume (`find_resume`) a checkpoint is checked before it is loaded (weights and state files
readable, sidecar valid); with `resume: auto` an unreadable `latest` falls back to the newest
readable earlier checkpoint with a note (the unreadable ones are moved into `checkpoints/corrupt/`);
otherwise the file is named in an `InputError`.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import struct
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from accelerate.utils import gather_object

from compclip.cli import InputError, RunFault, one_line
from models.checkpoint import (CheckpointMeta, CheckpointNotFound, atomic_write, latest_checkpoint, read_meta,
                               resolve_checkpoint, save_checkpoint, sidecar_path)

NAME = re.compile(r"^step-(\d+)\.pt$")
LOW_SPACE = 64 << 20  # a failed write with less free space than this is taken as a full disk


@dataclass
class TrainState:
    """Everything about progress that is not a tensor; saved with every checkpoint."""
    epoch: int = 0  # epochs completed
    step: int = 0  # optimiser steps completed
    batch_in_epoch: int = 0  # batches (per rank) consumed in the current epoch
    samples_seen: int = 0  # global anchors trained on
    streams: dict = field(default_factory=dict)  # rank -> stream id -> position/bad counters
    layout: dict = field(default_factory=dict)  # {"world_size", "workers"}: what the positions mean
    best: Optional[float] = None
    metrics: dict = field(default_factory=dict)  # latest eval metrics

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, data: dict[str, Any]) -> None:
        for key, value in data.items():
            setattr(self, key, value)


def state_dir(checkpoint: Path) -> Path:
    return checkpoint.with_suffix(".state")


def save(accelerator, ckpt_dir: Path, model, state: TrainState, local_streams: dict,
         meta: CheckpointMeta, is_best: bool, keep_last: int) -> Path:
    """Collective: every rank calls it. Returns the checkpoint's .pt path."""
    name = f"step-{state.step:07d}"
    state.streams = {rank: s for rank, s in gather_object([(accelerator.process_index, local_streams)])}
    final, tmp = ckpt_dir / f"{name}.state", ckpt_dir / f".{name}.state.tmp"
    path = ckpt_dir / f"{name}.pt"
    if accelerator.is_main_process:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        check_space(ckpt_dir, path)
    accelerator.wait_for_everyone()
    try:
        accelerator.save_state(str(tmp))
    except Exception as err:  # noqa: BLE001 -- any write failure: say what, keep the previous one
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_fault(err, final) from err
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        pointers = ("latest", "best") if is_best else ("latest",)
        try:
            save_checkpoint(ckpt_dir, name, accelerator.unwrap_model(model), meta, pointers=pointers)
        except Exception as err:  # noqa: BLE001
            if latest_name(ckpt_dir) != path.name:  # the pointers did not move: drop the torn step
                shutil.rmtree(final, ignore_errors=True)
                for torn in (path, sidecar_path(path)):
                    torn.unlink(missing_ok=True)
            raise write_fault(err, path) from err
        prune(ckpt_dir, keep_last)
    accelerator.wait_for_everyone()
    return path


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def check_space(ckpt_dir: Path, path: Path) -> None:
    """Refuse to start a checkpoint that cannot fit: less free space than the last one took."""
    last = latest_name(ckpt_dir)
    if not last:
        return
    need = _size(ckpt_dir / last) + _size(state_dir(ckpt_dir / last))
    free = shutil.disk_usage(ckpt_dir).free
    if free < need:
        raise RunFault(f"no space left on device writing {path}: {free / 2**20:.0f} MiB free, the last "
                       f"checkpoint took {need / 2**20:.0f} MiB; free space or move logging.output_dir "
                       f"(the previous checkpoint {ckpt_dir / last} is intact; rerun with checkpoint.resume=auto)")


def no_space(err: BaseException, where: Path) -> bool:
    """Whether a write failed for want of space: ENOSPC / EDQUOT in the chain, the OS's words in a
    wrapped message, or the disk nearly full now (torch's enforce message names neither)."""
    seen, e = set(), err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(e)
        if "No space left" in text or "os error 28" in text or "Disk quota exceeded" in text:
            return True
        e = e.__cause__ or e.__context__
    folder = Path(where)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free < LOW_SPACE
    except OSError:
        return False


def write_fault(err: BaseException, path: Path) -> RunFault:
    kept = "the previous checkpoint is intact; rerun with checkpoint.resume=auto"
    if no_space(err, path):
        return RunFault(f"no space left on device writing {path}; free space or move logging.output_dir ({kept})")
    return RunFault(f"writing checkpoint {path} failed: {one_line(err)} ({kept})")


def latest_name(ckpt_dir: Path, pointer: str = "latest") -> Optional[str]:
    """The name a pointer file holds (no check that it exists), or None."""
    try:
        return (Path(ckpt_dir) / pointer).read_text().strip() or None
    except OSError:
        return None


def prune(ckpt_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints, never the one `best` names."""
    found = sorted((int(m.group(1)), p) for p in ckpt_dir.glob("step-*.pt") if (m := NAME.match(p.name)))
    protect = set()
    for pointer in ("best", "latest"):
        if (ckpt_dir / pointer).is_file():
            protect.add((ckpt_dir / pointer).read_text().strip())
    for _, path in found[:-keep_last]:
        if path.name in protect:
            continue
        shutil.rmtree(state_dir(path), ignore_errors=True)
        path.with_suffix(".json").unlink(missing_ok=True)
        path.unlink(missing_ok=True)
    for stale in ckpt_dir.glob(".*.state.tmp"):  # from a run killed mid-save
        shutil.rmtree(stale, ignore_errors=True)


def existing_checkpoints(run_dir: Path) -> list[Path]:
    folder = run_dir / "checkpoints"
    return sorted(folder.glob("step-*.pt")) if folder.is_dir() else []


def clear_run(run_dir: Path, accelerator) -> None:
    """`checkpoint.overwrite`: remove an earlier run's checkpoints, eval log and TensorBoard events."""
    if accelerator.is_main_process:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
        (run_dir / "eval.jsonl").unlink(missing_ok=True)
    accelerator.wait_for_everyone()


def latest_step(ckpt_dir: Path) -> Optional[int]:
    latest = latest_checkpoint(ckpt_dir) if ckpt_dir.is_dir() else None
    match = NAME.match(latest.name) if latest else None
    return int(match.group(1)) if match else None


def record_metrics(ckpt_dir: Path, metrics: dict, best: bool) -> None:
    """Main process: put `metrics` into the latest checkpoint's sidecar; with `best`, point `best` at it."""
    latest = latest_checkpoint(ckpt_dir)
    if latest is None:
        return
    side = sidecar_path(latest)
    data = json.loads(side.read_text())
    data["metrics"] = dict(metrics)
    atomic_write(side, lambda f: json.dump(data, f, indent=1), "w")
    if best:
        atomic_write(ckpt_dir / "best", lambda f: f.write(latest.name + "\n"), "w")


def recorded_metrics(checkpoint: Path, best_metric: Optional[str]) -> tuple[dict, Optional[float]]:
    """The metrics a checkpoint's sidecar holds, and the best value so far (from `best`'s sidecar)."""
    meta = read_meta(checkpoint)
    metrics = dict(meta.metrics) if meta else {}
    best_value = None
    best = checkpoint.parent / "best"
    if best_metric and best.is_file():
        best_meta = read_meta(checkpoint.parent / best.read_text().strip())
        if best_meta:
            best_value = best_meta.metrics.get(best_metric.removeprefix("eval/"))
    return metrics, best_value


def _torch_file_problem(path: Path) -> Optional[str]:
    """Why a torch.save file cannot be read (a zip archive whose directory is intact), or None."""
    if not path.is_file():
        return f"{path} is missing"
    if path.stat().st_size == 0:
        return f"{path} is empty"
    try:
        with zipfile.ZipFile(path) as archive:
            archive.namelist()
    except (zipfile.BadZipFile, OSError) as err:
        return f"{path} is not a readable torch file ({err})"
    return None


def _safetensors_problem(path: Path) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if path.stat().st_size < 8 + length + end:
            return f"{path} is truncated"
    except (OSError, ValueError, KeyError, TypeError, struct.error) as err:
        return f"{path} is not a readable safetensors file ({type(err).__name__})"
    return None


def checkpoint_problem(checkpoint: Path) -> Optional[str]:
    """Why a checkpoint cannot be resumed from (naming the file), or None. Structural checks only:
    the weights and every state file readable as an archive, the sidecar valid JSON."""
    problem = _torch_file_problem(checkpoint)
    if problem:
        return problem
    try:
        if read_meta(checkpoint) is None:
            return f"{sidecar_path(checkpoint)} is missing"
    except (ValueError, TypeError) as err:
        return str(err)
    folder = state_dir(checkpoint)
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    if not files:
        return f"{folder} (the training state) is missing or empty"
    for path in files:
        if path.suffix in (".bin", ".pt", ".pth"):
            problem = _torch_file_problem(path)
        elif path.suffix == ".safetensors":
            problem = _safetensors_problem(path)
        else:
            problem = f"{path} is empty" if path.stat().st_size == 0 else None
        if problem:
            return problem
    return None


def _by_step(folder: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in folder.glob("step-*.pt") if (m := NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def _set_aside(checkpoints: list[Path]) -> None:
    if not checkpoints:
        return
    aside = checkpoints[0].parent / "corrupt"
    aside.mkdir(exist_ok=True)
    for ckpt in checkpoints:
        for part in (ckpt, sidecar_path(ckpt), state_dir(ckpt)):
            if part.exists():
                shutil.rmtree(aside / part.name, ignore_errors=True)
                os.replace(part, aside / part.name)


def find_resume(resume: Optional[str], run_dir: Path, note: Optional[Callable[[str], None]] = None) -> Optional[Path]:
    """Main process: the checkpoint to resume from. `auto`: this run's `latest` (None if the run has
    no checkpoint); an unreadable one falls back to the newest readable earlier checkpoint, with a
    note, and the unreadable newer ones move into `checkpoints/corrupt/`. A run folder /
    checkpoints folder / checkpoint file: that one, which must be readable (InputError naming the file)."""
    if resume is None:
        return None
    if resume == "auto":
        folder = run_dir / "checkpoints"
        if not folder.is_dir():
            return None
        named = latest_name(folder)
        candidates = _by_step(folder)
        if named is None and not candidates:
            return None
        if named is not None and (folder / named) in candidates:  # the pointer's first, then older ones
            candidates = [folder / named] + [c for c in candidates if c != folder / named]
        problems = []
        for ckpt in candidates:
            problem = checkpoint_problem(ckpt)
            if problem is None:
                if problems or (named and named != ckpt.name):
                    newer = [c for c in candidates if NAME.match(c.name) and
                             int(NAME.match(c.name).group(1)) > int(NAME.match(ckpt.name).group(1))]
                    _set_aside(newer)
                    atomic_write(folder / "latest", lambda f: f.write(ckpt.name + "\n"), "w")
                    first = problems[0] if problems else f"{folder / 'latest'} names {named}, which is missing"
                    if note:
                        note(f"checkpoint unreadable: {first}; resuming from {ckpt.name} instead "
                             f"(newer checkpoints moved to {folder / 'corrupt'})")
                return ckpt
            problems.append(problem)
        first = problems[0] if problems else f"{folder / 'latest'} names {named}, which is missing"
        raise InputError(f"cannot resume {run_dir}: {first}, and no earlier readable checkpoint; "
                         f"start over with checkpoint.resume=null checkpoint.overwrite=true")
    try:
        found = resolve_checkpoint(resume)
    except CheckpointNotFound as err:
        raise InputError(f"checkpoint.resume: {err}") from None
    problem = checkpoint_problem(found)
    if problem:
        raise InputError(f"checkpoint.resume: cannot resume: {problem}; give another checkpoint, or start over with "
                         f"checkpoint.resume=null checkpoint.overwrite=true")
    return found


def restore(accelerator, checkpoint: Path, state: TrainState) -> dict:
    """Load everything registered with the accelerator; returns this rank's stream positions."""
    try:
        accelerator.load_state(str(state_dir(checkpoint)))
    except Exception as err:  # noqa: BLE001 -- a damaged file the structural check missed
        raise InputError(f"cannot resume from {state_dir(checkpoint)}: {one_line(err)}; delete that checkpoint "
                         f"(an earlier one is then used) or start over with checkpoint.overwrite=true") from err
    streams = state.streams.get(accelerator.process_index, state.streams.get(str(accelerator.process_index), {}))
    return dict(streams)
