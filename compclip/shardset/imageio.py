"""Robust image decoding and deterministic encoding for the image generators.

Every image datagen reads goes through `decode_image` / `load_image_file`: a truncated, corrupt
or unreadable file raises `BadImage` naming the file or sample, and callers skip the item and
count it (`ShardSetWriter.skip("corrupt_image")`). Decoding is forced (`Image.load()`), so a
file whose header parses but whose pixels are truncated fails here, not later in a trainer
worker. `encode_image` writes PNG or JPEG bytes with fixed settings, so the same pixels always
give the same bytes (needed for byte-identical resumed shard sets).
"""
from __future__ import annotations

import io
import warnings
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from compclip.errors import CompclipError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
JPEG_QUALITY = 95


class BadImage(CompclipError, ValueError):
    """An image that cannot be decoded; the message names where it came from."""


def decode_image(data: bytes, where: str = "image", mode: str | None = None) -> Image.Image:
    """Decode bytes fully into a PIL image (converted to `mode` if given) or raise BadImage."""
    if not data:
        raise BadImage(f"{where}: empty image data")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            image.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError,
            Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise BadImage(f"{where}: cannot decode image ({type(err).__name__}: {err})") from None
    return image.convert(mode) if mode and image.mode != mode else image


def load_image_file(path: str | Path, mode: str | None = None) -> Image.Image:
    """Read and fully decode an image file, or raise BadImage naming the path."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise BadImage(f"{path}: cannot read ({err.strerror or err})") from None
    return decode_image(data, str(path), mode)


def encode_image(image: Image.Image, ext: str = "jpg") -> bytes:
    """Encode deterministically: `png` (lossless, keeps alpha) or `jpg` (RGB, quality 95)."""
    buf = io.BytesIO()
    if ext == "png":
        image.save(buf, format="PNG", optimize=False)
    elif ext in ("jpg", "jpeg"):
        image.convert("RGB").save(buf, format="JPEG", quality=JPEG_QUALITY, subsampling=0)
    elif ext == "webp":
        image.save(buf, format="WEBP", lossless=True)
    else:
        raise ValueError(f"cannot encode image as '{ext}' (png, jpg or webp)")
    return buf.getvalue()


def list_image_files(folder: str | Path) -> list[Path]:
    """Image files directly inside `folder`, sorted by name (deterministic order)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a folder of images")
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
