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
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from accelerate.utils import gather_object

from models.checkpoint import (CheckpointMeta, atomic_write, latest_checkpoint, read_meta, save_checkpoint,
                               sidecar_path)

NAME = re.compile(r"^step-(\d+)\.pt$")


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
    if accelerator.is_main_process:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    path = ckpt_dir / f"{name}.pt"
    if accelerator.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        pointers = ("latest", "best") if is_best else ("latest",)
        save_checkpoint(ckpt_dir, name, accelerator.unwrap_model(model), meta, pointers=pointers)
        prune(ckpt_dir, keep_last)
    accelerator.wait_for_everyone()
    return path


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


def find_resume(resume: Optional[str], run_dir: Path) -> Optional[Path]:
    """The checkpoint to resume from: `auto` = this run's latest (if any), or a run/checkpoint folder."""
    if resume is None:
        return None
    if resume == "auto":
        folder = run_dir / "checkpoints"
        return latest_checkpoint(folder) if folder.is_dir() else None
    folder = Path(resume)
    if (folder / "checkpoints").is_dir():
        folder = folder / "checkpoints"
    found = latest_checkpoint(folder) if folder.is_dir() else None
    if found is None:
        raise FileNotFoundError(f"checkpoint.resume: no 'latest' checkpoint in {folder}")
    return found


def restore(accelerator, checkpoint: Path, state: TrainState) -> dict:
    """Load everything registered with the accelerator; returns this rank's stream positions."""
    accelerator.load_state(str(state_dir(checkpoint)))
    streams = state.streams.get(accelerator.process_index, state.streams.get(str(accelerator.process_index), {}))
    return dict(streams)
