"""Model loading and the checkpoint format, shared by trainer, datagen and eval.

`load_model` is the one place a CLIP model is built: any open_clip architecture (ours included,
see `registry`) with a pretrained tag, an open_clip or compclip checkpoint file, or random
weights, guarded against the QuickGELU lineage trap. `checkpoint` writes and reads weights that
plain open_clip loads, with a JSON metadata sidecar, atomically.
"""
from models.checkpoint import CheckpointMeta, latest_checkpoint, read_meta, save_checkpoint
from models.load import ActivationMismatch, LoadedModel, ModelInfo, load_model

__all__ = [
    "ActivationMismatch", "CheckpointMeta", "LoadedModel", "ModelInfo", "latest_checkpoint",
    "load_model", "read_meta", "save_checkpoint",
]
