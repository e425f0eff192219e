"""The world's vocabulary: shapes, colours, sizes and spatial relations, with their words.

Everything the renderer can draw and the grammar can say is listed here, so adding a shape or a
colour is a one-line change (the renderer needs a drawing rule for a new shape in render.py).
"""
from __future__ import annotations

SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "star", "cross")

# Saturated base colours (RGB). Backgrounds are low-saturation, so every colour stands out.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (30, 70, 230),
    "yellow": (240, 220, 20),
    "purple": (150, 40, 190),
    "orange": (250, 130, 10),
}

# Size classes: object radius as a fraction of the image side. `None` (the unnamed size) is the
# medium class; the classes do not overlap, so "small" / "large" are never ambiguous.
SIZES: tuple[str, ...] = ("small", "large")
SIZE_RADIUS: dict[str | None, tuple[float, float]] = {
    "small": (0.07, 0.088),
    None: (0.105, 0.123),
    "large": (0.14, 0.163),
}
SIZE_WORDS: dict[str, str] = {"small": "small", "little": "small", "large": "large", "big": "large"}

# Canonical relations and their phrasings (the first phrase is the canonical one).
RELATIONS: tuple[str, ...] = ("left", "right", "above", "below")
RELATION_PHRASES: dict[str, tuple[str, ...]] = {
    "left": ("to the left of", "left of", "on the left of"),
    "right": ("to the right of", "right of", "on the right of"),
    "above": ("above", "over"),
    "below": ("below", "under", "beneath"),
}
INVERSE: dict[str, str] = {"left": "right", "right": "left", "above": "below", "below": "above"}

ARTICLES: tuple[str, ...] = ("a", "an", "the")


def article(word: str) -> str:
    """'a' or 'an' for the word that follows."""
    return "an" if word[0] in "aeiou" else "a"
