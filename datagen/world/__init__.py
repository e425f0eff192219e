"""The built-in synthetic scene world: the offline default for training data, benchmarks and
text-to-image generation (see docs/world.md).

Public API: `render_caption` (any caption of the grammar -> a matching image; the offline
stand-in for Stable Diffusion in TROHN-Img), `parse` / `describe` (captions <-> scenes),
`render_scene`, `write_object_bank` (objects for left-right stitching), `ParseError`, and the
CLI `python -m datagen.world build --out DIR --seed N`.
"""
from __future__ import annotations

from PIL import Image

from datagen.world.bank import object_image, write_object_bank
from datagen.world.grammar import ParseError, Style, all_styles, describe, parse
from datagen.world.layout import Layout, PlacementError, satisfies
from datagen.world.render import object_masks, render_scene
from datagen.world.scene import Obj, Rel, Scene, random_scene
from datagen.world.splits import Split


def render_caption(caption: str, size: int = 64, seed: int = 0) -> Image.Image:
    """Parse a caption of the grammar and render a scene it truly describes (RGB, size x size).

    Raises ParseError (a ValueError naming the caption and the unreadable part) for captions
    outside the grammar, and PlacementError (also a ValueError) for contradictory ones.
    """
    image, _ = render_scene(parse(caption), size, seed)
    return image


__all__ = ["render_caption", "write_object_bank", "object_image", "ParseError", "PlacementError",
           "Style", "all_styles", "describe", "parse", "Layout", "satisfies", "object_masks",
           "render_scene", "Obj", "Rel", "Scene", "random_scene", "Split"]
