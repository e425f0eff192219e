"""Image files on disk -> image bytes for a shard sample, with one clear error per bad file.

`ImageFiles(root).load(relative_path, where)` returns `(bytes, ext)`. By default the file's bytes
are copied untouched (no decode: fast, and byte-identical on a rerun); the type comes from the
file's magic bytes (JPEG, PNG or WebP), whatever its name says. With `max_side`, the image is
decoded, shrunk (aspect kept) when its longer side is larger, and re-encoded as JPEG with the
fixed settings of `compclip.shardset.imageio.encode_image` (same pixels, same bytes).

Errors name the file and `where` (the caption key, dataset row, ...): `MissingImage` for a file
that does not exist or cannot be read, `BadImage` for one that is not an image. Callers either
stop on them or, when asked to skip, count them as `missing_image` / `corrupt_image`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from PIL import Image

from compclip.shardset.imageio import BadImage, decode_image, encode_image
from compclip.errors import CompclipError

SKIP_MISSING, SKIP_CORRUPT = "missing_image", "corrupt_image"


class MissingImage(CompclipError, FileNotFoundError):
    """An image file that is not there (or unreadable); the message names it and its item."""

    def __str__(self) -> str:  # FileNotFoundError would print errno fields instead
        return self.args[0] if self.args else ""


def sniff_ext(data: bytes) -> Optional[str]:
    """`jpg`, `png` or `webp` from the magic bytes; None for anything else."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def image_bytes(data: bytes, where: str, max_side: Optional[int] = None) -> tuple[bytes, str]:
    """Check (and with `max_side`, shrink and re-encode) image bytes; BadImage names `where`."""
    ext = sniff_ext(data)
    if ext is None:
        raise BadImage(f"{where}: not a JPEG, PNG or WebP image")
    if not max_side:
        return data, ext
    image = decode_image(data, where, "RGB")
    if max(image.size) > max_side:
        scale = max_side / max(image.size)
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.BICUBIC)
    return encode_image(image, "jpg"), "jpg"


class ImageFiles:
    """Image files under one root folder (see the module docstring)."""

    def __init__(self, root: str | Path, max_side: Optional[int] = None):
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root}: images folder does not exist")
        self.max_side = max_side

    def load(self, relative: str, where: str) -> tuple[bytes, str]:
        path = self.root / relative
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise MissingImage(f"{path}: image file not found ({where})") from None
        except OSError as err:
            raise MissingImage(f"{path}: cannot read image file ({where}): "
                               f"{err.strerror or err}") from None
        return image_bytes(data, f"{path} ({where})", self.max_side)
