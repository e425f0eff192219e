"""Model loading and the checkpoint format, shared by trainer, datagen and eval.

`load_model` is the one place a CLIP model is built: any open_clip architecture (ours included,
see `registry`) with a pretrained tag, an open_clip or compclip checkpoint file, or random
weights, guarded against the QuickGELU lineage trap; a checkpoint may be a file, a pointer file, a
run folder or its `checkpoints/` folder (`checkpoint.resolve_checkpoint`). `checkpoint` writes and reads weights that
plain open_clip loads, with a JSON metadata sidecar, atomically. Names are imported on first use,
so a command that only writes files (datagen) does not pay for importing torch and open_clip.
"""
from __future__ import annotations

import importlib

_WHERE = {
    "CheckpointMeta": "compclip.models.checkpoint", "latest_checkpoint": "compclip.models.checkpoint",
    "read_meta": "compclip.models.checkpoint", "save_checkpoint": "compclip.models.checkpoint",
    "resolve_checkpoint": "compclip.models.checkpoint", "CheckpointError": "compclip.models.checkpoint",
    "CheckpointNotFound": "compclip.models.checkpoint",
    "ActivationMismatch": "compclip.models.load", "ArchitectureMismatch": "compclip.models.load",
    "CorruptCheckpoint": "compclip.models.load", "UnknownArchitecture": "compclip.models.load",
    "LoadedModel": "compclip.models.load", "ModelInfo": "compclip.models.load", "load_model": "compclip.models.load",
    "resolve_model": "compclip.models.load",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'models' has no attribute '{name}'")
    return getattr(importlib.import_module(_WHERE[name]), name)
