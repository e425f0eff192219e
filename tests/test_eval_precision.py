"""`--precision`: fp16 scoring rounds scores to the fp16 grid, so near-ties become exact ties
(counted wrong), as in the ARO / SugarCrepe++ reference scripts; the caller's model is untouched."""
import math

import numpy as np
import pytest
import torch

from compclip.eval.api import run
from compclip.eval.cache import EmbeddingCache
from compclip.eval.checksums import mark_local
from compclip.eval.metrics import argmax_correct, option_scores, triplet_correct
from compclip.eval.scorer import OpenClipScorer, TextScorer

# P2 and N both close to P1, P2 by 1e-4 closer: distinct in fp32, but 0.9001 and 0.9000 both round
# to the fp16 value 0.89990234375 (and to one bf16 value), so s(P1,P2) == s(P1,N) at low precision.
NEAR = {"p1": [1.0, 0.0, 0.0], "p2": [0.9001, math.sqrt(1 - 0.9001 ** 2), 0.0],
        "n": [0.9000, 0.0, math.sqrt(1 - 0.81)]}
CLEAR = {"p1": [1.0, 0.0, 0.0], "p2": [0.95, math.sqrt(1 - 0.95 ** 2), 0.0], "n": [0.5, 0.0, math.sqrt(0.75)]}


class Lookup(TextScorer):
    name = "lookup"

    def __init__(self, table, precision="fp32"):
        self.table, self.precision = table, precision

    def encode_texts(self, texts):
        return torch.tensor([self.table[t] for t in texts], dtype=torch.float32)


def write_visla(root, rows):
    (root / "visla").mkdir(parents=True)
    mark_local(root, "tests")  # hand-made files under the published names
    gen = ["filename\tcaption\tsecond positive\tnegative_caption"] + [f"x.jpg\t{a}\t{b}\t{c}" for a, b, c in rows]
    (root / "visla" / "Generic_VISLA.tsv").write_bytes("\r\n".join(gen).encode())
    (root / "visla" / "Spatial_VISLA.tsv").write_bytes(
        ("image\tsent1\tsent2\tBest reference (Semantically close)\r\n" + "y.jpg\t" + "\t".join(rows[0])).encode())


def test_fp16_scoring_turns_a_near_tie_into_a_tie(tmp_path):
    table = {}
    rows = []
    for k, case in enumerate([NEAR, CLEAR, NEAR]):
        names = [f"{part} {k}" for part in ("p1", "p2", "n")]
        table.update(dict(zip(names, (case["p1"], case["p2"], case["n"]))))
        rows.append(names)
    write_visla(tmp_path, rows)
    got, ties = {}, {}
    for precision in ("fp32", "fp16", "bf16"):
        cache = EmbeddingCache(Lookup(table, precision), progress=False)
        r = run(cache, ["visla"], str(tmp_path), options={"visla": {"subsets": ["generic"]}}, progress=False,
                reuse=False)["visla"]
        got[precision] = r.headline
        p1, p2, n = (cache.texts([row[i] for row in rows]) for i in range(3))
        assert p1.dtype == {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        ties[precision] = int(((p1 * p2).sum(-1) == (p1 * n).sum(-1)).sum())
        if precision != "fp32":
            assert any(f"scored in {precision}" in note for note in r.notes)
    assert ties == {"fp32": 0, "fp16": 2, "bf16": 2}
    assert got["fp32"]["generic/t2t"] == 1.0 and got["fp32"]["generic/t2t_p1_n"] == 1.0
    assert got["fp16"]["generic/t2t"] == pytest.approx(1 / 3) and got["fp16"]["generic/t2t_p1_n"] == pytest.approx(1 / 3)
    assert got["fp16"]["generic/t2t_p2_n"] == 1.0  # the clear half is unchanged


def test_fp16_argmax_tie_picks_the_false_caption():
    """VG-Relation rule: options [false, true]; an fp16 tie makes numpy's argmax pick the false one."""
    image = torch.tensor([NEAR["p1"]])
    options = torch.tensor([[NEAR["n"], NEAR["p2"]]])  # false scores 0.9000, true 0.9001
    assert argmax_correct(option_scores(image, options), answer=1).tolist() == [True]
    half = option_scores(image.half(), options.half())
    assert half[0, 0] == half[0, 1] and argmax_correct(half, answer=1).tolist() == [False]
    masks = triplet_correct(*(torch.tensor([NEAR[k]]).half() for k in ("p1", "p2", "n")))
    assert masks["t2t"].tolist() == [False]


def test_open_clip_scorer_fp16_copy_leaves_the_model_in_fp32(micro_model):
    from PIL import Image
    model = micro_model.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    s32 = OpenClipScorer.from_loaded(micro_model)
    s16 = OpenClipScorer.from_loaded(micro_model, precision="fp16")
    texts = ["a red dog on a table", "a table on a red dog"]
    images = [Image.new("RGB", (40, 40), (200, 10, 10)), Image.new("RGB", (40, 40), (10, 10, 200))]
    t32, t16 = s32.encode_texts(texts), s16.encode_texts(texts)
    i16 = s16.encode_images(images)
    assert t32.dtype == torch.float32 and t16.dtype == torch.float16 and i16.dtype == torch.float16
    assert torch.allclose(t16.float().norm(dim=-1), torch.ones(2), atol=2e-3)
    assert torch.allclose(t16.float(), t32, atol=2e-2)  # same model, coarser arithmetic
    assert all(v.dtype == before[k].dtype and torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="precision must be one of"):
        OpenClipScorer.from_loaded(micro_model, precision="fp8")
    assert np.asarray(option_scores(i16, t16[None].expand(2, 2, -1))).dtype == np.float32


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_lowered_copy_normalises_in_fp32_as_clip_does(micro_model, precision, monkeypatch):
    """Every LayerNorm of the low-precision copy keeps fp32 weights and hands the kernel the fp32
    value of its input, casting the result back (CLIP's LayerNorm): CUDA's kernel refuses a
    low-precision input with fp32 weights, which open_clip's plain LayerNorm would pass it."""
    from torch.nn import LayerNorm, functional
    from compclip.eval.precision import dtype_of, lowered_copy
    low = lowered_copy(micro_model.model, precision)
    norms = [m for m in low.modules() if isinstance(m, LayerNorm)]
    assert norms and all(m.weight.dtype == torch.float32 for m in norms)
    kernel, seen = functional.layer_norm, []
    monkeypatch.setattr(functional, "layer_norm", lambda x, *a, **k: seen.append(x.dtype) or kernel(x, *a, **k))
    x = torch.randn(3, norms[0].normalized_shape[0]).to(dtype_of(precision))
    for m in norms:
        want = kernel(x.float(), m.normalized_shape, m.weight, m.bias, m.eps)
        got = m(x)
        assert got.dtype == x.dtype and torch.equal(got, want.to(x.dtype))
    assert seen == [torch.float32] * len(norms)


def test_training_eval_scores_weights_held_in_bf16_in_bf16(micro_model):
    """Under DeepSpeed bf16 the trained model's weights are bf16: the epoch's eval scores them in bf16
    (images cast to it) instead of feeding them float32 pixels."""
    import copy

    from PIL import Image

    from compclip.eval.precision import precision_of
    from compclip.trainer import evaluation
    model = copy.deepcopy(micro_model.model).to(torch.bfloat16)
    assert precision_of(model) == "bf16" and precision_of(micro_model.model) == "fp32"
    images = [Image.new("RGB", (40, 40), (200, 10, 10))]
    with pytest.raises(RuntimeError, match="should be the same|dtype"):  # float32 pixels into bf16 weights
        OpenClipScorer(model, micro_model.preprocess, micro_model.tokenizer).encode_images(images)
    seen = {}

    def evaluate(scorer, benchmarks, root, options, progress):
        seen["images"] = scorer.encode_images(images)
        return {}
    import compclip.eval.api
    original, compclip.eval.api.evaluate = compclip.eval.api.evaluate, evaluate
    try:
        evaluation.evaluate_model(model, micro_model.preprocess, micro_model.tokenizer,
                                  evaluation.EvalConfig(benchmarks=[], data_root=None), "cpu", "t", progress=False)
    finally:
        compclip.eval.api.evaluate = original
    assert seen["images"].dtype == torch.bfloat16 and torch.isfinite(seen["images"].float()).all()
