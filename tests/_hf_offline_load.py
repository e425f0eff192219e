"""Load models from a Hugging Face cache through `compclip.models.load_model` (tests only).

`python tests/_hf_offline_load.py OUT.json ARCH_HUB` in a process whose HF_HOME holds the cache
(tests/fixtures/hf_cache.py) and HF_HUB_OFFLINE=1: loads `ViT-B-32` / `openai` (activation auto,
then gelu, which the QuickGELU guard refuses), `hf-hub:ARCH_HUB`, and `hf-hub:ARCH_HUB` with the
openai snapshot file as its checkpoint; writes what each gave, with the weights compared to the
files in the cache, to OUT.json.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from open_clip.factory import load_state_dict  # noqa: E402

from compclip.models import load_model  # noqa: E402
from compclip.models.load import ActivationMismatch  # noqa: E402
from tests.fixtures.hf_cache import COMMIT, repo_folder, tag_hub_file  # noqa: E402


def same_weights(model: torch.nn.Module, path: Path) -> bool:
    state = load_state_dict(str(path))
    built = model.state_dict()
    return set(state) == set(built) and all(torch.equal(state[k], built[k].reshape(state[k].shape)) for k in state)


def describe(loaded, weights: Path) -> dict:
    size = loaded.model.visual.image_size
    return {**loaded.info.as_dict(), "same_weights": same_weights(loaded.model, weights),
            "image_size": list(size) if isinstance(size, (tuple, list)) else [size, size],
            "params": sum(p.numel() for p in loaded.model.parameters())}


def main(out: str, hub_repo: str) -> None:
    import os
    home = Path(os.environ["HF_HOME"])
    repo, filename = tag_hub_file("ViT-B-32", "openai")
    openai_file = repo_folder(home, repo) / "snapshots" / COMMIT / filename
    hub_file = repo_folder(home, hub_repo) / "snapshots" / COMMIT / "open_clip_pytorch_model.bin"
    result = {"openai": describe(load_model("ViT-B-32", "openai"), openai_file)}
    try:
        load_model("ViT-B-32", "openai", activation="gelu")
        result["openai_gelu"] = "loaded"
    except ActivationMismatch as err:
        result["openai_gelu"] = f"ActivationMismatch: {err}"
    result["hf_hub"] = describe(load_model(f"hf-hub:{hub_repo}"), hub_file)
    result["hf_hub_checkpoint"] = describe(load_model(f"hf-hub:{hub_repo}", str(openai_file)), openai_file)
    Path(out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
