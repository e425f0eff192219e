"""Drawing a layout with Pillow: a varied background, then each object as a filled shape.

Backgrounds are low-saturation (solid with noise, linear gradients at any angle, smooth blotches
or stripes) so the saturated object colours always stand out. Objects are drawn at `SUPERSAMPLE`
times the output size and box-filtered down, which keeps small shapes recognisable at 64 px.
`object_masks` redraws each object alone at output size, for tests and for the object bank.
"""
from __future__ import annotations

import io
import math
import random

import numpy as np
from PIL import Image, ImageDraw

from compclip.datagen.world.layout import Layout, Placed, place
from compclip.datagen.world.scene import Scene

SUPERSAMPLE = 2
BACKGROUNDS = ("solid", "gradient", "blotches", "stripes")


def _muted(rng: random.Random) -> np.ndarray:
    grey = rng.uniform(70, 200)
    return np.array([grey + rng.uniform(-22, 22) for _ in range(3)], dtype=np.float32)


def background(size: int, rng: random.Random, kind: str | None = None) -> Image.Image:
    """A size x size RGB background of a random (or the given) kind."""
    kind = kind or rng.choice(BACKGROUNDS)
    nrng = np.random.default_rng(rng.getrandbits(32))
    a, b = _muted(rng), _muted(rng)
    if kind == "solid":
        img = np.broadcast_to(a, (size, size, 3)) + nrng.normal(0, 6, (size, size, 1))
    elif kind in ("gradient", "stripes"):
        theta = rng.uniform(0, 2 * math.pi)
        ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
        t = xs * math.cos(theta) + ys * math.sin(theta)
        if kind == "gradient":
            t = (t - t.min()) / max(1e-6, t.max() - t.min())
        else:
            t = (np.sin(t * rng.uniform(4, 12) * math.pi + rng.uniform(0, 6.3)) > 0).astype(np.float32)
        img = a + (b - a) * t[..., None] + nrng.normal(0, 3, (size, size, 1))
    elif kind == "blotches":
        coarse = nrng.uniform(0, 1, (4, 4)).astype(np.float32)
        t = np.asarray(Image.fromarray(coarse, mode="F").resize((size, size), Image.BICUBIC))
        img = a + (b - a) * np.clip(t, 0, 1)[..., None] + nrng.normal(0, 3, (size, size, 1))
    else:
        raise ValueError(f"unknown background kind '{kind}' (one of {BACKGROUNDS})")
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def shape_points(p: Placed, scale: float = 1.0) -> list[tuple[float, float]] | None:
    """Polygon vertices of a placed object (None for a circle), scaled by `scale`."""
    cx, cy, r, a = p.cx * scale, p.cy * scale, p.r * scale, math.radians(p.angle)

    def ring(n: int, radius: float, start: float, radii: list[float] | None = None):
        pts = []
        for k in range(n):
            rad = radius * (radii[k % len(radii)] if radii else 1.0)
            t = start + a + 2 * math.pi * k / n
            pts.append((cx + rad * math.cos(t), cy + rad * math.sin(t)))
        return pts

    shape = p.obj.shape
    if shape == "circle":
        return None
    if shape == "square":
        return ring(4, r, math.pi / 4)
    if shape == "diamond":
        return ring(4, r, -math.pi / 2, [1.0, 0.62])  # a rhombus standing on a corner
    if shape == "triangle":
        return ring(3, r, -math.pi / 2)
    if shape == "star":
        return ring(10, r, -math.pi / 2, [1.0, 0.45])
    if shape == "cross":
        w = 0.36  # half-width of the arms, relative to r
        base = [(w, 1), (w, w), (1, w), (1, -w), (w, -w), (w, -1), (-w, -1), (-w, -w), (-1, -w),
                (-1, w), (-w, w), (-w, 1)]
        ca, sa = math.cos(a), math.sin(a)
        s = r / math.hypot(1, w)
        return [(cx + s * (x * ca - y * sa), cy + s * (x * sa + y * ca)) for x, y in base]
    raise ValueError(f"no drawing rule for shape '{shape}'")


def _draw(draw: ImageDraw.ImageDraw, p: Placed, scale: float, fill, outline, width: int) -> None:
    pts = shape_points(p, scale)
    if pts is None:
        cx, cy, r = p.cx * scale, p.cy * scale, p.r * scale
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill, outline=outline, width=width)
    else:
        draw.polygon(pts, fill=fill, outline=outline, width=width)


def draw_layout(layout: Layout, rng: random.Random, bg: Image.Image | None = None) -> Image.Image:
    """Render a layout on a random background (or on `bg`)."""
    size = layout.size
    big = size * SUPERSAMPLE
    canvas = (bg if bg is not None else background(size, rng)).resize((big, big), Image.NEAREST)
    draw = ImageDraw.Draw(canvas)
    for p in layout.objects:
        outline = tuple(int(c * 0.55) for c in p.rgb)
        _draw(draw, p, SUPERSAMPLE, p.rgb, outline, SUPERSAMPLE)
    return canvas.reduce(SUPERSAMPLE)


def render_scene(scene: Scene, size: int = 64, seed: int = 0) -> tuple[Image.Image, Layout]:
    """Place and draw a scene; deterministic for (scene, size, seed)."""
    rng = random.Random(seed)
    layout = place(scene, size, rng)
    return draw_layout(layout, rng), layout


def object_masks(layout: Layout) -> list[np.ndarray]:
    """One boolean size x size mask per object, drawn alone (objects never overlap)."""
    masks = []
    for p in layout.objects:
        m = Image.new("L", (layout.size, layout.size), 0)
        _draw(ImageDraw.Draw(m), p, 1.0, 255, 255, 1)
        masks.append(np.asarray(m) > 0)
    return masks


def encode(image: Image.Image, ext: str = "jpg") -> bytes:
    """Image bytes: JPEG quality 95 (fixed settings, so bytes are reproducible) or PNG."""
    buf = io.BytesIO()
    if ext == "jpg":
        image.save(buf, format="JPEG", quality=95)
    else:
        image.save(buf, format="PNG")
    return buf.getvalue()
