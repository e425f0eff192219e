"""Small architectures of our own, registered into open_clip's model registry.

open_clip's smallest built-in config has ~43M parameters; tests and the CPU demo need far less.
Every JSON file in `models/configs/` becomes an open_clip architecture of the same name, so
`open_clip.create_model_and_transforms("tiny-vit-64", pretrained=path)` works once this module
is imported. Import side effect only; idempotent.
"""
from pathlib import Path

import open_clip

CONFIG_DIR = Path(__file__).with_name("configs")
TINY_ARCHS = tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.json")))


def register_tiny_archs() -> tuple[str, ...]:
    if not set(TINY_ARCHS) <= set(open_clip.list_models()):
        open_clip.add_model_config(CONFIG_DIR)
    return TINY_ARCHS


register_tiny_archs()
