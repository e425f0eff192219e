"""The built-in synthetic scene world: the offline default for training data, benchmarks and
text-to-image generation (see docs/world.md).

Public API: `render_caption` (any caption of the grammar -> a matching image; the offline
stand-in for Stable Diffusion in TROHN-Img), `parse` / `describe` (captions <-> scenes),
`render_scene`, `write_object_bank` (objects for left-right stitching), `ParseError`, and the
CLI `python -m datagen world build --out DIR --seed N`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Imported on first use (PEP 562), so `python -m datagen world --help` reads no numpy / PIL.
_WHERE = {"object_image": "bank", "write_object_bank": "bank", "ParseError": "grammar",
          "Style": "grammar", "all_styles": "grammar", "describe": "grammar", "parse": "grammar",
          "Layout": "layout", "PlacementError": "layout", "satisfies": "layout",
          "object_masks": "render", "render_scene": "render", "Obj": "scene", "Rel": "scene",
          "Scene": "scene", "random_scene": "scene", "Split": "splits"}

if TYPE_CHECKING:
    from PIL import Image


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'compclip.datagen.world' has no attribute '{name}'")


def render_caption(caption: str, size: int = 64, seed: int = 0) -> "Image.Image":
    """Parse a caption of the grammar and render a scene it truly describes (RGB, size x size).

    Raises ParseError (a ValueError naming the caption and the unreadable part) for captions
    outside the grammar, and PlacementError (also a ValueError) for contradictory ones.
    """
    from compclip.datagen.world.grammar import parse
    from compclip.datagen.world.render import render_scene
    image, _ = render_scene(parse(caption), size, seed)
    return image


__all__ = ["render_caption", "write_object_bank", "object_image", "ParseError", "PlacementError",
           "Style", "all_styles", "describe", "parse", "Layout", "satisfies", "object_masks",
           "render_scene", "Obj", "Rel", "Scene", "random_scene", "Split"]
