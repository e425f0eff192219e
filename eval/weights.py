"""Weights that are not finite are refused before they are scored.

A run that diverged saves NaN or inf weights; scored, they give every text and image the same
NaN embedding, every comparison a tie, and plausible-looking numbers (SugarCrepe 0.0, ARO-Order
1.0). `python -m eval score` refuses them with `NonFiniteWeights` (bad input, exit 2), one line
naming the checkpoint and the number of non-finite values: `check_file` reads a PyTorch
checkpoint file before any model is loaded, `check_model` checks every model right after
`models.load_model` built it (weights in any format, open_clip tags included). Only floating-point
tensors of the state dict are counted (parameters and persistent buffers).
"""
from __future__ import annotations

import zipfile
from typing import Iterable, Optional

import torch

from compclip.cli import InputError


class NonFiniteWeights(InputError, ValueError):
    """Weights holding NaN or inf values (bad input: exit 2)."""


def count_nonfinite(named: Iterable[tuple[str, torch.Tensor]]) -> tuple[int, int, list[str]]:
    """(non-finite values, tensors counted, names of the tensors holding some)."""
    bad, tensors, names = 0, 0, []
    for name, tensor in named:
        if not torch.is_tensor(tensor) or not tensor.is_floating_point():
            continue
        tensors += 1
        n = int((~torch.isfinite(tensor)).sum())
        if n:
            bad += n
            names.append(name)
    return bad, tensors, names


def refuse_nonfinite(what: str, named: Iterable[tuple[str, torch.Tensor]]) -> None:
    """`NonFiniteWeights` naming `what` when any floating-point tensor holds NaN or inf."""
    bad, tensors, names = count_nonfinite(named)
    if bad:
        raise NonFiniteWeights(
            f"{what}: {bad} non-finite weight value(s) (NaN or inf) in {len(names)} of {tensors} tensors "
            f"(first: {names[0]}); scored, they would give NaN ties, not results: give an earlier checkpoint "
            "of the run (step-*.pt in its checkpoints/ folder)")


def file_state(path: str) -> Optional[dict]:
    """The state dict of a PyTorch checkpoint file (zip or legacy pickle, read with
    `weights_only`, memory-mapped where possible); None for files of other formats or that
    torch cannot read (`models.load_model` reports those)."""
    with open(path, "rb") as f:
        head = f.read(2)
    if not (zipfile.is_zipfile(path) or head.startswith(b"\x80")):
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True, mmap=head == b"PK")
    except Exception:  # noqa: BLE001 -- unreadable files are load_model's to report
        return None
    state = data.get("state_dict", data) if isinstance(data, dict) else None
    return state if isinstance(state, dict) else None


def check_file(path: str) -> None:
    """Refuse a checkpoint file whose weights are not all finite (`NonFiniteWeights`)."""
    state = file_state(path)
    if state is not None:
        refuse_nonfinite(path, state.items())


def check_model(model: torch.nn.Module, what: str) -> None:
    """Refuse a built model whose state dict is not all finite (`NonFiniteWeights`)."""
    refuse_nonfinite(what, getattr(model, "module", model).state_dict().items())
