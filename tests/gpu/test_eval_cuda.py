"""Eval scoring on CUDA gives what it gives on the CPU: every benchmark of the synthetic fixture
(`tests.fixtures.eval_data.make_data_root`, real on-disk formats) scored by one random `tiny-vit-64` on both
devices, fp32 (TF32 off, tests/gpu/conftest.py), and the bf16 scorer on CUDA close to fp32. ARO and
left-right tag captions with spaCy: left out where spaCy is not installed (a bare GPU image).

Tolerance: each text and image embedding (unit vectors) within 1e-4 per component of the CPU's
(fp32 kernels differ in summation order only: ~1e-6 seen for such towers). A benchmark decision
compares two cosines, so it can flip only where the CPU's margin is below ~2e-4; we allow one
headline metric in all to differ (a near tie), by at most 0.1, and require every other one equal.
A wrong transform, dtype or device hand-off moves embeddings by far more than 1e-4."""
import pytest
import torch

from compclip.eval.api import run
from compclip.eval.registry import list_benchmarks
from compclip.eval.scorer import OpenClipScorer, Scorer
from tests.fixtures.eval_data import make_data_root

ZS = {"zeroshot": {"datasets": ["cifar10", "cifar100"]}}
NEED_SPACY = {"aro", "left_right"}


def benchmarks() -> list[str]:
    import importlib.util
    have_spacy = importlib.util.find_spec("spacy") is not None
    return [b for b in list_benchmarks() if have_spacy or b not in NEED_SPACY]


class Recording(Scorer):
    """Passes through to a scorer and keeps every text and image it was asked to encode."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        self.texts, self.images = [], []

    def encode_texts(self, texts):
        self.texts += list(texts)
        return self.inner.encode_texts(texts)

    def encode_images(self, images):
        self.images += list(images)
        return self.inner.encode_images(images)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    from compclip.models import load_model
    root = str(make_data_root(tmp_path_factory.mktemp("eval_gpu") / "data", n=6, seed=3))
    torch.manual_seed(0)
    loaded = load_model("tiny-vit-64")
    cpu = Recording(OpenClipScorer.from_loaded(loaded, batch_size=32))
    torch.manual_seed(0)
    on_gpu = load_model("tiny-vit-64", device="cuda")
    assert next(on_gpu.model.parameters()).is_cuda
    cuda = OpenClipScorer.from_loaded(on_gpu, batch_size=32, device="cuda")
    names = benchmarks()
    assert len(names) >= 7
    return {"cpu": run(cpu, names, root, ZS, progress=False), "cuda": run(cuda, names, root, ZS, progress=False),
            "recording": cpu, "cuda_scorer": cuda, "root": root, "names": names, "loaded_gpu": on_gpu}


def test_same_weights_on_both_devices(scored):
    from compclip.models import load_model
    torch.manual_seed(0)
    cpu_state = load_model("tiny-vit-64").model.state_dict()
    for k, v in scored["loaded_gpu"].model.state_dict().items():
        assert torch.equal(v.cpu(), cpu_state[k]), k


def test_embeddings_agree(scored):
    rec, cuda = scored["recording"], scored["cuda_scorer"]
    assert len(rec.texts) > 50 and len(rec.images) > 20
    texts = list(dict.fromkeys(rec.texts))
    t_cpu, t_gpu = rec.inner.encode_texts(texts), cuda.encode_texts(texts)
    i_cpu, i_gpu = rec.inner.encode_images(rec.images), cuda.encode_images(rec.images)
    assert t_gpu.device.type == "cpu" and t_gpu.dtype == t_cpu.dtype  # scores are returned on the CPU
    assert (t_gpu - t_cpu).abs().max() <= 1e-4
    assert (i_gpu - i_cpu).abs().max() <= 1e-4


def test_benchmark_accuracies_agree(scored):
    cpu, cuda = scored["cpu"], scored["cuda"]
    assert set(cpu) == set(cuda) == set(scored["names"])
    diffs = []
    for name in cpu:
        assert cpu[name].counts == cuda[name].counts, name
        assert set(cpu[name].headline) == set(cuda[name].headline), name
        for metric, value in cpu[name].headline.items():
            other = cuda[name].headline[metric]
            if value != other and not (value != value and other != other):  # NaN == NaN here
                diffs.append((name, metric, value, other))
    assert len(diffs) <= 1 and all(abs(a - b) <= 0.1 for *_, a, b in diffs), diffs


def test_bf16_scorer_on_cuda_close_to_fp32(scored):
    rec = scored["recording"]
    low = OpenClipScorer.from_loaded(scored["loaded_gpu"], batch_size=32, device="cuda", precision="bf16")
    texts = list(dict.fromkeys(rec.texts))[:200]
    ref, got = rec.inner.encode_texts(texts).float(), low.encode_texts(texts).float()
    cos = (ref * got).sum(-1)
    assert torch.isfinite(got).all() and cos.min() > 0.99
    metrics = run(low, ["sugarcrepe", "visla"], scored["root"], progress=False)
    assert all(0 <= v <= 1 for r in metrics.values() for v in r.headline.values() if v == v)


def test_fp16_scorer_on_cuda_close_to_fp32(scored):
    """fp16 (`precision="fp16"`: the towers' weights and the scores in fp16, as the reference
    scripts) keeps 11 significant bits: unit embeddings within cosine 0.999 of fp32's on the CPU."""
    rec = scored["recording"]
    low = OpenClipScorer.from_loaded(scored["loaded_gpu"], batch_size=32, device="cuda", precision="fp16")
    texts, images = list(dict.fromkeys(rec.texts))[:200], rec.images[:64]
    for ref, got in ((rec.inner.encode_texts(texts), low.encode_texts(texts)),
                     (rec.inner.encode_images(images), low.encode_images(images))):
        assert got.dtype == torch.float16 and got.device.type == "cpu"
        cos = (ref.float() * got.float()).sum(-1)
        assert torch.isfinite(got).all() and cos.min() > 0.999, cos.min()
    metrics = run(low, ["sugarcrepe", "visla"], scored["root"], progress=False)
    assert all(0 <= v <= 1 for r in metrics.values() for v in r.headline.values() if v == v)
