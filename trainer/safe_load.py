"""Reading torch files of a training state without running code from them.

`torch.load(..., weights_only=False)` unpickles whatever a file holds, so a tampered checkpoint
runs code on resume. Every torch file the trainer reads back goes through `load` here: torch's
weights-only unpickler with a short allow-list (`ALLOWED`, by dotted name: numpy's pieces of the RNG
states accelerate writes, the three DeepSpeed classes its ZeRO optimiser states hold; DeepSpeed's
imported only when a file names them). `problem(path)` says why a file would not load that way
(naming the global it asks for), or None. `guard_deepspeed(engine)` makes a DeepSpeed engine read
its checkpoints through `load` (DeepSpeed's own loader uses `weights_only=False`). accelerate
reads the rest of the state itself with `weights_only=True`.
"""
from __future__ import annotations

import importlib
import zipfile
from pathlib import Path
from typing import Any, Optional

import torch

from compclip.errors import CompclipError

NUMPY = ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype",
         "numpy.dtypes.UInt32DType")  # numpy's RNG state in accelerate's random_states_<rank>.pkl
DEEPSPEED = ("deepspeed.runtime.fp16.loss_scaler.LossScaler", "deepspeed.runtime.zero.config.ZeroStageEnum",
             "deepspeed.utils.tensor_fragment.fragment_address")  # DeepSpeed ZeRO-1/2 optimiser states
ALLOWED = NUMPY + DEEPSPEED


class UnsafeFile(CompclipError, ValueError):
    """A file that cannot be read as plain data (tensors, numbers, strings, containers)."""


def _resolve(name: str) -> Any:
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _allowed_for(path: Path) -> list:
    """numpy's allow-listed globals, and those of DeepSpeed's that a torch zip file names (its
    classes are imported only then); any other global makes the load fail."""
    names = list(NUMPY)
    if zipfile.is_zipfile(path):
        try:
            names += [n for n in torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) if n in DEEPSPEED]
        except Exception:  # noqa: BLE001 -- a damaged archive: the load itself says what is wrong
            pass
    found = []
    for name in names:
        try:
            found.append(_resolve(name))
        except (ImportError, AttributeError):  # another numpy version, or no DeepSpeed installed
            pass
    return found


def _reason(err: BaseException) -> str:
    """The line of torch's many-line message that says what the unpickler refused."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    marker = "WeightsUnpickler error:"
    at = next((i for i, line in enumerate(lines) if marker in line), None)
    if at is not None:
        text = lines[at].split(marker, 1)[1].strip() or (lines[at + 1] if at + 1 < len(lines) else "")
    else:
        text = lines[0] if lines else type(err).__name__
    return text.split(" was not an allowed global")[0][:200]


def load(path: str | Path, map_location: Any = None, mmap: bool = False) -> Any:
    """`torch.load` with `weights_only=True` and the allow-list; `UnsafeFile` naming the file and
    what it asked for when the file holds anything else (nothing in it is run). `mmap`: map a zip
    file's tensors instead of reading them."""
    path = Path(path)
    try:
        with torch.serialization.safe_globals(_allowed_for(path)):
            return torch.load(path, map_location=map_location, weights_only=True,
                              mmap=mmap and zipfile.is_zipfile(path))
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 -- UnpicklingError, RuntimeError for damaged archives
        raise UnsafeFile(f"{path} does not load with torch.load(weights_only=True) ({_reason(err)})") from None


def problem(path: str | Path) -> Optional[str]:
    """Why `load(path)` fails (one line naming the file), or None; tensors are mapped, not read."""
    try:
        load(path, map_location="cpu", mmap=True)
    except (UnsafeFile, OSError) as err:
        return str(err)
    return None


def guard_deepspeed(engine: Any) -> None:
    """Make a DeepSpeed engine read its checkpoint files through `load` (a no-op for other models)."""
    checkpoint_engine = getattr(engine, "checkpoint_engine", None)
    if checkpoint_engine is not None and hasattr(checkpoint_engine, "load"):
        checkpoint_engine.load = lambda path, map_location=None: load(path, map_location)
