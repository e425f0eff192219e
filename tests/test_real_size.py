"""Real size on CPU: ViT-B-32 weights from a Hugging Face cache laid out as huggingface_hub and
open_clip write and read it (tests/fixtures/hf_cache.py, random weights), loaded offline through
`load_model` for the `openai` tag and an `hf-hub:` model, then one NegCLIP-layout training step
and an eval pass at 224 px (tests/fixtures/real_size.py). Correctness only: the time and peak
memory of the same step and pass are bench/bench_real_size.py's (bench/results/real_size.json)."""
import copy
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

from compclip.models import load_model
from tests.fixtures.eval_data import make_data_root
from tests.fixtures.hf_cache import add_hf_hub_model, add_tag_weights
from tests.fixtures.real_size import eval_pass, negclip_batch, train_step

pytestmark = pytest.mark.slow
HUB_REPO = "compclip-test/ViT-B-32-gelu"


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf_home")
    openai_file, _ = add_tag_weights(home, "ViT-B-32", "openai", seed=1)
    add_hf_hub_model(home, HUB_REPO, "ViT-B-32", seed=2, quick_gelu=False)
    yield home, openai_file
    shutil.rmtree(home, ignore_errors=True)  # 1.2 GB of weights; tmp_path_factory keeps it otherwise


@pytest.fixture(scope="module")
def loaded(hf_home):
    """ViT-B-32 with the cache's openai weights, loaded here from the snapshot file as
    `model.pretrained: <file>` with `model.lineage: openai` would (the tag path is the subprocess's)."""
    return load_model("ViT-B-32", str(hf_home[1]), lineage="openai")


def test_cache_layout_is_huggingface_hubs(hf_home):
    """The fake cache is one huggingface_hub itself resolves offline, to the files open_clip asks for."""
    import huggingface_hub
    home, openai_file = hf_home
    hub = str(home / "hub")
    found = huggingface_hub.try_to_load_from_cache("timm/vit_base_patch32_clip_224.openai",
                                                   "open_clip_model.safetensors", cache_dir=hub)
    assert found == str(openai_file) and os.path.islink(found)
    for name in ("open_clip_config.json", "open_clip_pytorch_model.bin"):
        assert isinstance(huggingface_hub.try_to_load_from_cache(HUB_REPO, name, cache_dir=hub), str), name


def test_openai_and_hf_hub_load_offline_with_the_quickgelu_guard(hf_home, tmp_path):
    home, _ = hf_home
    out = tmp_path / "loaded.json"
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    proc = subprocess.run([sys.executable, "tests/_hf_offline_load.py", str(out), HUB_REPO], env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    openai = got["openai"]
    assert (openai["activation"], openai["lineage"], openai["weights_activation"]) == ("quickgelu", "openai", "quickgelu")
    assert openai["same_weights"] and openai["image_size"] == [224, 224] and openai["params"] > 150e6
    assert got["openai_gelu"].startswith("ActivationMismatch: ViT-B-32 with weights 'openai' (openai lineage) "
                                         "was trained with quickgelu"), got["openai_gelu"]
    hub = got["hf_hub"]
    assert (hub["arch"], hub["activation"], hub["weights_activation"]) == (f"hf-hub:{HUB_REPO}", "gelu", "gelu")
    assert hub["same_weights"] and hub["image_size"] == [224, 224]
    assert got["hf_hub_checkpoint"]["same_weights"]  # the checkpoint's weights, not the hub's


def test_negclip_step_at_224px(loaded):
    model = copy.deepcopy(loaded.model)
    batch = negclip_batch(loaded, b=2)
    assert tuple(batch.images.shape) == (4, 3, 224, 224) and batch.texts.shape[0] == 8
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loss = train_step(model, batch)
    assert math.isfinite(loss) and loss > 0
    after = model.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert "visual.conv1.weight" in changed and "token_embedding.weight" in changed
    assert len(changed) > 0.9 * len(before)


def test_eval_pass_at_224px_gives_every_metric(loaded, tmp_path):
    root = make_data_root(tmp_path / "data", n=2, seed=1)
    flat = eval_pass(loaded, root)
    visla = [f"{split}/{m}" for split in ("generic", "spatial")
             for m in ("i2t", "p1_n", "p2_n", "t2t", "t2t_p1_n", "t2t_p2_n")]
    expected = ({f"bivlc/{m}" for m in ("group", "i2t", "i2t_neg", "i2t_pos", "t2i", "t2i_neg", "t2i_pos")}
                | {f"visla/{m}" for m in visla})
    assert set(flat) == expected, sorted(set(flat) ^ expected)
    assert all(0.0 <= v <= 1.0 for v in flat.values()), flat
