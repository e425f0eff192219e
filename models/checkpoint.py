"""The checkpoint format: open_clip-loadable weights, a JSON sidecar, atomic writes.

`<dir>/<name>.pt` holds `{"state_dict": ...}`. Beside it, `<dir>/<name>.json` holds
`CheckpointMeta` (architecture, activation, lineage, source weights, recipe, step, epoch, metrics,
the precision training ran in, recipe changes accepted on resume) and the name plain open_clip
builds the model under with the activation it was trained with (`open_clip_arch`, e.g.
`ViT-B-32-quickgelu` for an `arch` of `ViT-B-32` trained with QuickGELU, and `open_clip_kwargs`,
empty unless open_clip has no such name: models/openclip_name.py), so that
`open_clip.create_model_and_transforms(open_clip_arch, pretrained="<dir>/<name>.pt",
**open_clip_kwargs)` gives our outputs. `python -m trainer export` writes open_clip's
local-dir / Hugging Face form of a checkpoint (trainer/export.py). Every
file is written to a temporary name, flushed and renamed, and the pointer `<dir>/latest` is moved only
after both files are complete, so a kill mid-save never leaves a torn checkpoint as the latest one.
`compclip.fileio.atomic_write` gives its files the mode a plain `open()` would (0666 less the umask),
not the 0600 of its temporary file.

`resolve_checkpoint(path)` is the one reading of "a checkpoint" every command accepts (docs/cli.md):
a checkpoint file, a pointer file (`best`, `latest`), a run's `checkpoints/` folder or the run
folder itself (their `latest`). Whatever is wrong with it (a missing path, a run that has saved
nothing, a pointer naming a removed file, a damaged sidecar) is a `CheckpointError`: bad input,
one line naming the path and the fix.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from typing import TYPE_CHECKING

from compclip.cli import InputError
from compclip.fileio import atomic_write

if TYPE_CHECKING:  # torch is imported where weights are saved
    from torch import nn

FORMAT_VERSION = 1
POINTERS = ("latest", "best")
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".npz", ".npy")
FORMS = "a checkpoint file (.pt), a pointer file (best, latest), a run's checkpoints/ folder or the run folder"


class CheckpointError(InputError, ValueError):
    """A path given as a checkpoint that names no usable checkpoint (bad input: exit 2)."""


class CheckpointNotFound(CheckpointError, FileNotFoundError):
    """The path, or the checkpoint a pointer or run folder stands for, does not exist."""

    def __str__(self) -> str:  # OSError would prefix an errno; keep the message as written
        return self.args[0]


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
    precision: Optional[str] = None  # what training ran in (recipe.precision fp16/bf16 runs as fp32 on CPU)
    recipe_changes: list[dict[str, Any]] = field(default_factory=list)  # [{"step", "changes": {key: [old, new]}}]
    format: int = FORMAT_VERSION
    open_clip_arch: Optional[str] = None  # the name plain open_clip builds it under (filled in by save_checkpoint)
    open_clip_kwargs: dict[str, Any] = field(default_factory=dict)  # and its keyword arguments, if any


def sidecar_path(checkpoint: str | Path) -> Path:
    return Path(checkpoint).with_suffix(".json")


def save_checkpoint(
    directory: str | Path,
    name: str,
    model: nn.Module,
    meta: CheckpointMeta,
    pointers: tuple[str, ...] = ("latest",),
) -> Path:
    """Save weights and sidecar, then move each pointer file (e.g. `latest`, `best`) to them.
    `meta.open_clip_arch` / `open_clip_kwargs`, when not set, are filled in (in place) from its
    architecture and activation."""
    directory = Path(directory)
    if meta.open_clip_arch is None:
        from compclip.models.openclip_name import plain_open_clip_name
        meta.open_clip_arch, meta.open_clip_kwargs = plain_open_clip_name(meta.arch, meta.activation)
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
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{side}: checkpoint metadata is not valid JSON ({err}); restore it from the run "
                              f"or delete it and give the architecture explicitly") from None
    known = {f.name for f in fields(CheckpointMeta)}
    missing = [k for k in ("arch", "activation", "lineage") if not isinstance(data, dict) or k not in data]
    if missing:
        raise CheckpointError(f"{side}: checkpoint metadata lacks {', '.join(missing)}; restore it from the run "
                              f"or delete it and give the architecture explicitly")
    return CheckpointMeta(**{k: v for k, v in data.items() if k in known})


def latest_checkpoint(directory: str | Path, pointer: str = "latest") -> Optional[Path]:
    """The checkpoint a pointer file names, or None if there is no complete one yet."""
    pointer_file = Path(directory) / pointer
    if not pointer_file.is_file():
        return None
    path = Path(directory) / pointer_file.read_text().strip()
    if not (path.is_file() and sidecar_path(path).is_file()):
        raise CheckpointNotFound(f"{pointer_file} names {path.name}, which is missing or has no sidecar; "
                                 f"give another checkpoint of the run (ls {directory})")
    return path


def is_pointer(path: str | Path) -> bool:
    """A pointer file: a short text file holding one checkpoint file name (what `save_checkpoint`
    writes as `latest` / `best`)."""
    path = Path(path)
    if path.suffix in WEIGHT_SUFFIXES or not path.is_file() or path.stat().st_size > 1024:
        return False
    try:
        lines = path.read_text(encoding="utf-8").split()
    except (UnicodeDecodeError, OSError):
        return False
    return len(lines) == 1 and Path(lines[0]).suffix in WEIGHT_SUFFIXES


def resolve_checkpoint(path: str | Path, pointer: str = "latest") -> Path:
    """The checkpoint file `path` stands for: a checkpoint file as it is; a pointer file (`best`,
    `latest`): the file it names; a run's `checkpoints/` folder or the run folder: its `pointer`.
    Raises `CheckpointNotFound` (one line naming the path and the fix) when there is none."""
    given = Path(path)
    if not given.exists():
        raise CheckpointNotFound(f"{given}: no such checkpoint; give {FORMS}")
    found = given
    if given.is_dir():
        folder = given / "checkpoints" if (given / "checkpoints").is_dir() else given
        found = folder / pointer
        if not found.is_file():
            saved = sorted(p.name for p in folder.glob("*.pt"))
            what = (f"holds {len(saved)} checkpoint file(s) ({saved[-1]} last) but no '{pointer}' pointer; "
                    f"give one of them" if saved else "holds no checkpoint yet (the run has saved none); give "
                    "a run folder that holds one, or a checkpoint file")
            raise CheckpointNotFound(f"{given}: {'its checkpoints/ folder ' if folder != given else ''}{what}")
    if is_pointer(found):
        target = found.parent / found.read_text(encoding="utf-8").strip()
        if not target.is_file():
            raise CheckpointNotFound(f"{found} names {target.name}, which is missing (removed by the run's "
                                     f"keep_last?); give another checkpoint of the run (ls {found.parent})")
        return target
    return found
