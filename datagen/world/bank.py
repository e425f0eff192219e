"""The object bank: one RGBA image per colour-shape object, plus plain background images.

Used by the left-right stitching pipeline, which pastes two objects onto a background. Each
object is centred on a transparent `size` x `size` canvas (alpha is the supersampled shape mask,
colour is the object's own colour right up to the edge, so pasting leaves no dark fringe).
File names are the object's noun phrase: `red_circle.png`. Backgrounds: `backgrounds/bg_000.png`.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Iterable

from PIL import Image, ImageDraw

from compclip.datagen.world.layout import Placed
from compclip.datagen.world.render import BACKGROUNDS, SUPERSAMPLE, _draw, background
from compclip.datagen.world.scene import Obj
from compclip.datagen.world.vocab import COLOURS, SHAPES

BANK_RADIUS = 0.42  # object radius as a fraction of the canvas side


def object_image(obj: Obj, size: int = 64, angle: float = 0.0) -> Image.Image:
    """One object, centred, on a transparent RGBA canvas."""
    big = size * SUPERSAMPLE
    rgb = COLOURS[obj.colour]
    p = Placed(obj, size / 2, size / 2, BANK_RADIUS * size, angle, rgb)
    colour = Image.new("RGB", (big, big), rgb)
    _draw(ImageDraw.Draw(colour), p, SUPERSAMPLE, rgb, tuple(int(c * 0.55) for c in rgb), SUPERSAMPLE)
    alpha = Image.new("L", (big, big), 0)
    _draw(ImageDraw.Draw(alpha), p, SUPERSAMPLE, 255, 255, SUPERSAMPLE)
    image = colour.convert("RGBA")
    image.putalpha(alpha)
    return image.reduce(SUPERSAMPLE)


def write_object_bank(out_dir: str | Path, size: int = 64, seed: int = 0, n_backgrounds: int = 8,
                      exclude: Iterable[tuple[str, str]] = ()) -> list[Path]:
    """Write every colour x shape object (minus `exclude`d (colour, shape) bindings, e.g. a split's
    held-out ones) and `n_backgrounds` backgrounds; returns the paths written, objects first."""
    out_dir = Path(out_dir)
    (out_dir / "backgrounds").mkdir(parents=True, exist_ok=True)
    skip = {tuple(b) for b in exclude}
    paths = []
    for colour in COLOURS:
        for shape in SHAPES:
            if (colour, shape) in skip:
                continue
            path = out_dir / f"{colour}_{shape}.png"
            object_image(Obj(shape, colour), size).save(path)
            paths.append(path)
    rng = random.Random(f"world-bank:{seed}")
    for k in range(n_backgrounds):
        path = out_dir / "backgrounds" / f"bg_{k:03d}.png"
        background(size, rng, BACKGROUNDS[k % len(BACKGROUNDS)]).save(path)
        paths.append(path)
    return paths
