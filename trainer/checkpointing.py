"""Checkpoints for use (open_clip-loadable weights) and for resume (the whole training state).

A checkpoint `step-0000120` in `<run_dir>/checkpoints/` is:

    step-0000120.pt, step-0000120.json   `models.save_checkpoint`: weights + CheckpointMeta sidecar
    step-0000120.state/                  `accelerator.save_state`: model, optimiser, grad scaler,
                                         RNG of every rank; and `trainer_state.json` (written here):
                                         `TrainState` (step, epoch, data position of every rank's
                                         streams) and the learning-rate scheduler's state
    latest, best                         pointer files (a checkpoint's .pt name)

Weights whose values are not all finite are never written: `save` counts them first and stops the
run (`RunFault` naming the step and the count), the pointers staying on the previous checkpoint.
The state folder is written under a temporary name and renamed when every rank is done (its files
given the mode `open()` would give them); then the weights and sidecar are written atomically and
only then the pointers move, so a kill at any moment leaves `latest` naming a complete checkpoint.
An epoch's checkpoint is written before its evaluation; `record_metrics` then puts the metrics into
its sidecar and moves `best`, and a resumed run reads them back from the sidecars
(`recorded_metrics`). The last `keep_last` checkpoints are kept, plus the one `best` names.

Faults: before writing, the free space is compared with the size of the last checkpoint; a write
that fails for want of space (ENOSPC anywhere in the error's chain, or a failed write with the disk
nearly full: torch's own message never says so) becomes `RunFault("no space left on device writing
<path>")`, the half-written state is removed and the pointers stay on the previous checkpoint.
On resume (`find_resume`) a checkpoint is checked before it is loaded (`checkpoint_problem`: weights
readable and finite, sidecar valid, every torch file of the state folder loadable by
`trainer.safe_load` — torch's weights-only unpickler, so a file that would run code on loading is
refused unread — accelerate's RNG states of the expected shape, the trainer state valid JSON); with
`resume: auto` an unusable `latest` falls back to the newest usable earlier checkpoint with a note
(the unusable ones are moved into `checkpoints/corrupt/`); otherwise the file is named in an
`InputError`. `restore` reads the trainer state as JSON (or, from a state folder of the earlier
format, accelerate's `custom_checkpoint_<i>.pkl` through `safe_load`; accelerate, which would
unpickle those with `weights_only=False`, is then shown the folder without them), makes a DeepSpeed
engine read its files through `safe_load`, and lets accelerate load the rest.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import struct
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
from accelerate.utils import broadcast_object_list, gather_object

from compclip.cli import InputError, RunFault, one_line
from compclip.fileio import atomic_write, default_mode
from compclip.models.checkpoint import (CheckpointMeta, CheckpointNotFound, latest_checkpoint, read_meta, resolve_checkpoint,
                               save_checkpoint, sidecar_path)
from compclip.trainer import safe_load

NAME = re.compile(r"^step-(\d+)\.pt$")
LOW_SPACE = 64 << 20  # a failed write with less free space than this is taken as a full disk
STATE_FILE = "trainer_state.json"  # in the state folder: TrainState and the scheduler's state
TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".pkl")  # pickled files in a state folder (torch.save)


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
    recipe_changes: list = field(default_factory=list)  # accepted on resume (checkpoint.allow_recipe_change)

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, data: dict[str, Any]) -> None:
        known = {f.name for f in fields(self)}
        for key, value in data.items():
            if key in known:
                setattr(self, key, value)


def state_dir(checkpoint: Path) -> Path:
    return checkpoint.with_suffix(".state")


def count_non_finite(state_dict: dict) -> int:
    """Values of the floating-point tensors of a state dict that are NaN or infinite."""
    return sum(int((~torch.isfinite(v)).sum()) for v in state_dict.values()
               if isinstance(v, torch.Tensor) and v.is_floating_point())


def refuse_non_finite(accelerator, model, ckpt_dir: Path, path: Path, step: int) -> None:
    """Collective: stop (RunFault, every rank) before weights with NaN / inf values are written."""
    bad = None
    if accelerator.is_main_process:
        bad = count_non_finite(accelerator.unwrap_model(model).state_dict())
    if accelerator.num_processes > 1:
        bad = broadcast_object_list([bad])[0]
    if bad:
        advice = ("to continue from it with a lower optim.lr, rerun with checkpoint.resume=auto "
                  "checkpoint.allow_recipe_change=true")
        raise RunFault(f"not writing checkpoint {path.name}: the weights hold {bad:,} non-finite value(s) at step "
                       f"{step} (training diverged); {kept(ckpt_dir, advice)}")


def write_state(folder: Path, state: TrainState, scheduler) -> None:
    """`trainer_state.json` of a state folder: the TrainState and the scheduler's state, as JSON."""
    data = {"train_state": state.state_dict(), "scheduler": scheduler.state_dict()}
    atomic_write(folder / STATE_FILE, lambda f: json.dump(data, f, indent=1), "w")


def read_state(folder: Path) -> dict:
    """{"train_state", "scheduler"} of a state folder: `trainer_state.json`, or in the earlier format
    accelerate's custom_checkpoint_0.pkl (scheduler) and _1.pkl (TrainState) read by `safe_load`.
    ValueError naming the file when neither is usable."""
    path = folder / STATE_FILE
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as err:
            raise ValueError(f"{path} is not valid JSON ({err})") from None
        if not (isinstance(data, dict) and isinstance(data.get("train_state"), dict)
                and isinstance(data.get("scheduler"), dict)):
            raise ValueError(f"{path} lacks its 'train_state' / 'scheduler' objects")
        return data
    earlier = [folder / f"custom_checkpoint_{i}.pkl" for i in (0, 1)]
    if not all(p.is_file() for p in earlier):
        raise ValueError(f"{path} (the trainer state) is missing")
    parts = []
    for part in earlier:
        value = safe_load.load(part)
        if not isinstance(value, dict):
            raise ValueError(f"{part} holds no state dict")
        parts.append(value)
    return {"scheduler": parts[0], "train_state": parts[1]}


def honour_umask(folder: Path) -> None:
    """Give every file under `folder` the mode `open()` would (safetensors writes 0600); a file
    this process may not change (another user's) is left as it is."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                os.chmod(path, default_mode(executable=bool(path.stat().st_mode & 0o100)))
            except PermissionError:
                pass


def save(accelerator, ckpt_dir: Path, model, scheduler, state: TrainState, local_streams: dict,
         meta: CheckpointMeta, is_best: bool, keep_last: int) -> Path:
    """Collective: every rank calls it. Returns the checkpoint's .pt path. Weights with non-finite
    values are not written (`refuse_non_finite`)."""
    name = f"step-{state.step:07d}"
    final, tmp = ckpt_dir / f"{name}.state", ckpt_dir / f".{name}.state.tmp"
    path = ckpt_dir / f"{name}.pt"
    refuse_non_finite(accelerator, model, ckpt_dir, path, state.step)
    state.streams = {rank: s for rank, s in gather_object([(accelerator.process_index, local_streams)])}
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
        try:
            write_state(tmp, state, scheduler)
            honour_umask(tmp)
        except Exception as err:  # noqa: BLE001
            shutil.rmtree(tmp, ignore_errors=True)
            raise write_fault(err, final) from err
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
                       f"({kept(ckpt_dir)})")


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


def kept(ckpt_dir: Path, advice: str = "rerun with checkpoint.resume=auto") -> str:
    """What a failed or refused checkpoint leaves: the previous one (named, with `advice`), or none."""
    last = latest_name(ckpt_dir)
    if last and (ckpt_dir / last).is_file():
        return f"the previous checkpoint {ckpt_dir / last} is intact; {advice}"
    return "no checkpoint was written before this one, so a rerun starts from the beginning"


def write_fault(err: BaseException, path: Path) -> RunFault:
    ckpt_dir = path.parent
    if no_space(err, path):
        return RunFault(f"no space left on device writing {path}; free space or move logging.output_dir "
                        f"({kept(ckpt_dir)})")
    return RunFault(f"writing checkpoint {path} failed: {one_line(err)} ({kept(ckpt_dir)})")


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
    """`checkpoint.overwrite`: remove an earlier run's checkpoints, eval log and per-item values,
    best.json and TensorBoard events."""
    if accelerator.is_main_process:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        shutil.rmtree(run_dir / "eval_items", ignore_errors=True)
        shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
        (run_dir / "eval.jsonl").unlink(missing_ok=True)
        (run_dir / "best.json").unlink(missing_ok=True)
    accelerator.wait_for_everyone()


def pointer_step(ckpt_dir: Path, pointer: str) -> Optional[int]:
    """The step of the checkpoint a pointer file (`best`, `latest`) names, None without one."""
    name = latest_name(ckpt_dir, pointer)
    match = NAME.match(name) if name else None
    return int(match.group(1)) if match else None


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


def resume_candidate(resume: Optional[str], run_dir: Path) -> Optional[Path]:
    """The checkpoint `checkpoint.resume` names, read-only (pre-flight: no fallback, and None when
    it cannot be found; the run itself then says why)."""
    if resume is None:
        return None
    try:
        if resume == "auto":
            folder = run_dir / "checkpoints"
            return latest_checkpoint(folder) if folder.is_dir() else None
        return resolve_checkpoint(resume)
    except (ValueError, OSError):
        return None


def check_recipe(checkpoint: Path, recipe) -> dict:
    """The training keys (`trainer.recipe.TRAINING_KEYS`) whose value in the recipe recorded in the
    checkpoint's sidecar differs from `recipe`'s, as {key: [old, new]}. Any such change is an
    InputError naming every one, unless `checkpoint.allow_recipe_change`."""
    from compclip.trainer.recipe import describe_changes, recipe_to_dict, training_changes
    try:
        meta = read_meta(checkpoint)
    except ValueError:
        return {}  # a damaged sidecar: checkpoint_problem names it
    if meta is None or not meta.recipe:
        return {}
    changes = training_changes(meta.recipe, recipe_to_dict(recipe))
    if changes and not recipe.checkpoint.allow_recipe_change:
        raise InputError(f"checkpoint.resume: {checkpoint} was trained with another recipe: "
                         f"{describe_changes(changes)}; resume with the values it was trained with, set "
                         f"checkpoint.allow_recipe_change=true to continue with the new ones (recorded in the "
                         f"checkpoints' sidecars), or start over with checkpoint.resume=null checkpoint.overwrite=true")
    old, new = changes.get("optim.text_lr", (None, None))
    if (old is None) != (new is None):
        raise InputError(f"checkpoint.resume: {checkpoint}: optim.text_lr {json.dumps(old)} -> {json.dumps(new)} "
                         f"changes the optimiser's parameter groups, which a resume cannot; start a new run from "
                         f"its weights (model.pretrained={checkpoint} checkpoint.resume=null)")
    return {key: [old, new] for key, (old, new) in changes.items()}


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


def _weights_problem(checkpoint: Path) -> Optional[str]:
    """Why the weights file is no resume point: not plain data, or values that are NaN / infinite."""
    try:
        data = safe_load.load(checkpoint, map_location="cpu", mmap=True)
    except (safe_load.UnsafeFile, OSError) as err:
        return str(err)
    weights = data.get("state_dict", data) if isinstance(data, dict) else None
    if not isinstance(weights, dict):
        return f"{checkpoint} holds no state dict"
    bad = count_non_finite(weights)
    return f"{checkpoint} holds {bad:,} non-finite weight value(s)" if bad else None


def _rng_problem(path: Path) -> Optional[str]:
    """accelerate's `random_states_<rank>.pkl` (which it would skip silently if it did not load):
    plain data of the shape it writes."""
    try:
        data = safe_load.load(path, map_location="cpu")
    except (safe_load.UnsafeFile, OSError) as err:
        return str(err)
    if not (isinstance(data, dict) and isinstance(data.get("random_state"), tuple)
            and isinstance(data.get("numpy_random_seed"), tuple)
            and isinstance(data.get("torch_manual_seed"), torch.Tensor)):
        return f"{path} is not accelerate's RNG state (random_state, numpy_random_seed, torch_manual_seed)"
    return None


def _state_file_problem(path: Path) -> Optional[str]:
    if path.suffix in TORCH_SUFFIXES:
        problem = _torch_file_problem(path)
        if problem:
            return problem
        return _rng_problem(path) if path.name.startswith("random_states_") else safe_load.problem(path)
    if path.suffix == ".safetensors":
        return _safetensors_problem(path)
    return f"{path} is empty" if path.stat().st_size == 0 else None


def checkpoint_problem(checkpoint: Path) -> Optional[str]:
    """Why a checkpoint cannot be resumed from (naming the file), or None: the weights readable
    and finite, the sidecar valid JSON, every torch file of the state folder readable by
    `safe_load` (nothing in it is run), the RNG states of accelerate's shape, the trainer state
    valid (`read_state`), the safetensors headers consistent with the file sizes."""
    problem = _torch_file_problem(checkpoint)
    if problem:
        return problem
    try:
        if read_meta(checkpoint) is None:
            return f"{sidecar_path(checkpoint)} is missing"
    except (ValueError, TypeError) as err:
        return str(err)
    problem = _weights_problem(checkpoint)
    if problem:
        return problem
    folder = state_dir(checkpoint)
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    if not files:
        return f"{folder} (the training state) is missing or empty"
    for path in files:
        problem = _state_file_problem(path)
        if problem:
            return problem
    try:
        read_state(folder)
    except (ValueError, OSError) as err:
        return str(err)
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
    no checkpoint); an unusable one (`checkpoint_problem`) falls back to the newest usable earlier
    checkpoint, with a note, and the unusable newer ones move into `checkpoints/corrupt/`. A run
    folder / checkpoints folder / checkpoint file: that one, which must be usable (InputError naming
    the file)."""
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
                        note(f"checkpoint unusable: {first}; resuming from {ckpt.name} instead "
                             f"(newer checkpoints moved to {folder / 'corrupt'})")
                return ckpt
            problems.append(problem)
        first = problems[0] if problems else f"{folder / 'latest'} names {named}, which is missing"
        raise InputError(f"cannot resume {run_dir}: {first}, and no earlier usable checkpoint; "
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


@contextmanager
def _accelerate_view(folder: Path) -> Iterator[Path]:
    """The folder `accelerator.load_state` reads: the state folder itself, or, when it holds files
    named custom_checkpoint_<i>.pkl (the earlier format: `read_state` reads them safely; accelerate
    would unpickle them with weights_only=False), a temporary folder of links to everything else."""
    custom = set(folder.glob("custom_checkpoint_*.pkl"))
    if not custom:
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="compclip-resume-") as view:
        for entry in folder.iterdir():
            if entry not in custom:
                os.symlink(entry.resolve(), Path(view) / entry.name)
        yield Path(view)


def restore(accelerator, checkpoint: Path, model, scheduler, state: TrainState) -> dict:
    """Load the model, optimiser and RNG states (accelerate; a DeepSpeed engine reading through
    `safe_load`), the scheduler's and the trainer's state (`read_state`); returns this rank's
    stream positions."""
    folder = state_dir(checkpoint)
    try:
        saved = read_state(folder)
        safe_load.guard_deepspeed(model)
        with _accelerate_view(folder) as where:
            accelerator.load_state(str(where))
        known = scheduler.state_dict()
        scheduler.load_state_dict({k: v for k, v in saved["scheduler"].items() if k in known})
        state.load_state_dict(saved["train_state"])
    except Exception as err:  # noqa: BLE001 -- a damaged file the checks missed
        raise InputError(f"cannot resume from {folder}: {one_line(err)}; delete that checkpoint "
                         f"(an earlier one is then used) or start over with checkpoint.overwrite=true") from err
    streams = state.streams.get(accelerator.process_index, state.streams.get(str(accelerator.process_index), {}))
    return dict(streams)
