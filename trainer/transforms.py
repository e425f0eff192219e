"""Image transforms split between the loader workers and the device.

open_clip's transforms end in `ToTensor` (float in [0, 1]) and `Normalize`. `split_normalize`
keeps everything before them in the workers and replaces the tail with a uint8 tensor
(`PILToTensor`): batches then travel from the workers (and over the host-to-device copy) at a
quarter of the bytes, and `DeviceNormalize` does `x / 255`, then `(x - mean) / std` on the device,
the same float32 operations `ToTensor` + `Normalize` do, so the model sees identical inputs
(`tests/test_trainer_data.py`). A transform of another shape is kept whole (floats from workers).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torchvision import transforms as T


class DeviceNormalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8:  # already normalised (a transform that was not split)
            return images
        mean, std = self.mean.to(images.device), self.std.to(images.device)
        return images.float().div_(255).sub_(mean).div_(std)


def split_normalize(preprocess: Callable) -> tuple[Callable, Optional[DeviceNormalize]]:
    """(the workers' part returning uint8 tensors, the device part), or (preprocess, None)."""
    steps = getattr(preprocess, "transforms", None)
    if not steps or len(steps) < 2 or not isinstance(steps[-1], T.Normalize) or not isinstance(steps[-2], T.ToTensor):
        return preprocess, None
    return T.Compose(list(steps[:-2]) + [T.PILToTensor()]), DeviceNormalize(steps[-1].mean, steps[-1].std)


def to_model_input(normalize: Optional[Callable], dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """The device's step before the model: `normalize` (when the transform was split), then a cast
    to `dtype`, the dtype of the model's weights. Float32 weights (autocast or none): no cast.
    DeepSpeed's bf16 / fp16 engine holds the weights in that dtype and does not autocast, so its
    inputs must come in that dtype."""
    def to_input(images: torch.Tensor) -> torch.Tensor:
        if normalize is not None:
            images = normalize(images)
        return images.to(dtype) if images.is_floating_point() and images.dtype != dtype else images
    return to_input
