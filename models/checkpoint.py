"""The checkpoint format: open_clip-loadable weights, a JSON sidecar, atomic writes.

`<dir>/<name>.pt` holds `{"state_dict": ...}`, which plain
`open_clip.create_model_and_transforms(arch, pretrained="<dir>/<name>.pt")` loads. Beside it,
`<dir>/<name>.json` holds `CheckpointMeta` (architecture, activation, lineage, source weights,
recipe, step, epoch, metrics). Every file is written to a temporary name, flushed and renamed, and
the pointer `<dir>/latest` is moved only after both files are complete, so a kill mid-save never
leaves a torn checkpoint as the latest one.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Optional

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where weights are saved: datagen imports atomic_write alone
    from torch import nn

FORMAT_VERSION = 1


@dataclass
class CheckpointMeta:
    arch: str
    activation: str  # "gelu" | "quickgelu" | "n/a"
    lineage: str  # "openai" | "other" | "unknown" | "none"
    pretrained: Optional[str] = None  # the weights training started from
    step: int = 0
    epoch: int = 0
    recipe: Optional[dict[str, Any]] = None
    metrics: dict[str, float] = field(default_factory=dict)
    overlap: dict[str, int] = field(default_factory=dict)  # benchmark -> training images in it
    format: int = FORMAT_VERSION


def atomic_write(path: str | Path, write: Callable[[Any], None], mode: str = "wb") -> Path:
    """Write `path` through `write(fileobj)` into a temporary file, fsync, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def sidecar_path(checkpoint: str | Path) -> Path:
    return Path(checkpoint).with_suffix(".json")


def save_checkpoint(
    directory: str | Path,
    name: str,
    model: nn.Module,
    meta: CheckpointMeta,
    pointers: tuple[str, ...] = ("latest",),
) -> Path:
    """Save weights and sidecar, then move each pointer file (e.g. `latest`, `best`) to them."""
    directory = Path(directory)
    model = getattr(model, "module", model)  # DDP / accelerate wrappers
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    path = directory / f"{name}.pt"
    import torch
    atomic_write(path, lambda f: torch.save({"state_dict": state}, f))
    atomic_write(sidecar_path(path), lambda f: json.dump(asdict(meta), f, indent=1), mode="w")
    for pointer in pointers:
        atomic_write(directory / pointer, lambda f: f.write(path.name + "\n"), mode="w")
    return path


def read_meta(checkpoint: str | Path) -> Optional[CheckpointMeta]:
    """The sidecar of a checkpoint, or None for a checkpoint that has none (plain open_clip)."""
    side = sidecar_path(checkpoint)
    if not side.is_file():
        return None
    try:
        data = json.loads(side.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{side}: checkpoint metadata is not valid JSON ({err})") from None
    known = {f.name for f in fields(CheckpointMeta)}
    missing = [k for k in ("arch", "activation", "lineage") if k not in data]
    if missing:
        raise ValueError(f"{side}: checkpoint metadata lacks {', '.join(missing)}")
    return CheckpointMeta(**{k: v for k, v in data.items() if k in known})


def latest_checkpoint(directory: str | Path, pointer: str = "latest") -> Optional[Path]:
    """The checkpoint a pointer file names, or None if there is no complete one yet."""
    pointer_file = Path(directory) / pointer
    if not pointer_file.is_file():
        return None
    path = Path(directory) / pointer_file.read_text().strip()
    if not (path.is_file() and sidecar_path(path).is_file()):
        raise FileNotFoundError(f"{pointer_file} names {path.name}, which is missing or has no sidecar")
    return path
