"""The score cache (eval.scorecache): a model with a file-hash or pinned-tag identity scored again
on unchanged benchmark files encodes nothing; a new benchmark, a changed benchmark file or a
changed checkpoint is scored; a damaged entry is scored again with a warning."""
import json
import logging

import torch

from compclip.eval.api import run
from compclip.eval.scorecache import ScoreCache, model_identity
from compclip.eval.scorer import Scorer
from tests.fixtures.eval_data import make_data_root


class Counting(Scorer):
    """Deterministic embeddings; counts encode calls and keeps the texts it was asked for."""
    name = "counting"

    def __init__(self, identity):
        self.cache_identity, self.calls, self.texts = identity, 0, []

    def encode_texts(self, texts):
        self.calls += 1
        self.texts += list(texts)
        return torch.nn.functional.normalize(torch.tensor([[len(t) % 7 + 1.0, t.count("a") + 1.0, 1.0]
                                                           for t in texts]), dim=-1)

    def encode_images(self, images):
        self.calls += 1
        return torch.nn.functional.normalize(torch.tensor([[float(im.convert("L").getpixel((0, 0))) + 1, 1.0, 2.0]
                                                           for im in images]), dim=-1)


ID = {"pretrained": "openai", "arch": "ViT-B-32", "lineage": "auto", "precision": "fp32", "device": "cpu"}


def score(root, benchmarks, cache, identity=ID):
    scorer = Counting(identity)
    results = run(scorer, benchmarks, str(root), progress=False, per_instance=True, score_cache=cache)
    return scorer, {k: r.as_dict(with_instances=True) for k, r in results.items()}


def test_second_score_encodes_nothing_and_matches(tmp_path):
    root = make_data_root(tmp_path / "data", n=4)
    cache = ScoreCache(tmp_path / "scores")
    first, a = score(root, ["visla", "sugarcrepe"], cache)
    second, b = score(root, ["visla", "sugarcrepe"], cache)
    assert first.calls > 0 and second.calls == 0
    assert a == b and a["sugarcrepe"]["instances"]
    assert len(list((tmp_path / "scores").glob("*.json"))) == 2


def test_new_benchmark_scores_only_itself(tmp_path):
    root = make_data_root(tmp_path / "data", n=4)
    cache = ScoreCache(tmp_path / "scores")
    score(root, ["visla"], cache)
    both, _ = score(root, ["visla", "sugarcrepe_pp"], cache)
    alone, _ = score(root, ["sugarcrepe_pp"], None)
    assert both.calls > 0 and sorted(both.texts) == sorted(alone.texts)


def test_changed_benchmark_file_is_scored_again(tmp_path, caplog):
    root = make_data_root(tmp_path / "data", n=4)
    cache = ScoreCache(tmp_path / "scores")
    _, before = score(root, ["visla", "sugarcrepe"], cache)
    path = root / "sugarcrepe" / "add_att.json"
    data = json.loads(path.read_text())
    item = next(iter(data.values()))
    item["caption"] = item["caption"][:-1] + ("X" if item["caption"][-1] != "X" else "Y")  # one byte
    path.write_text(json.dumps(data, indent=4))
    with caplog.at_level(logging.INFO):
        scorer, after = score(root, ["visla", "sugarcrepe"], cache)
    assert scorer.calls > 0 and item["caption"] in scorer.texts
    assert "visla: scores from the score cache" in caplog.text
    assert "sugarcrepe: scores from the score cache" not in caplog.text
    assert after["visla"] == before["visla"]


def test_changed_checkpoint_is_scored_again(tmp_path):
    root = make_data_root(tmp_path / "data", n=4)
    cache = ScoreCache(tmp_path / "scores")
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"weights-0")
    first = model_identity("micro-vit-32", str(ckpt), "auto", "fp32", "cpu")
    score(root, ["visla"], cache, first)
    again, _ = score(root, ["visla"], cache, model_identity("micro-vit-32", str(ckpt), "auto", "fp32", "cpu"))
    assert again.calls == 0
    ckpt.write_bytes(b"weights-1")
    changed = model_identity("micro-vit-32", str(ckpt), "auto", "fp32", "cpu")
    assert changed != first
    scorer, _ = score(root, ["visla"], cache, changed)
    assert scorer.calls > 0
    fp16, _ = score(root, ["visla"], cache, model_identity("micro-vit-32", str(ckpt), "auto", "fp16", "cpu"))
    assert fp16.calls > 0  # precision is part of the key


def test_corrupt_entry_is_scored_again_with_a_warning(tmp_path, caplog):
    root = make_data_root(tmp_path / "data", n=4)
    cache = ScoreCache(tmp_path / "scores")
    _, before = score(root, ["sugarcrepe"], cache)
    entry, = (tmp_path / "scores").glob("*.json")
    entry.write_text(entry.read_text()[:50])
    with caplog.at_level(logging.WARNING):
        scorer, after = score(root, ["sugarcrepe"], cache)
    assert scorer.calls > 0 and after == before
    assert f"score cache entry {entry} not used" in caplog.text
    third, _ = score(root, ["sugarcrepe"], cache)  # rewritten whole
    assert third.calls == 0


def test_entry_holding_another_key_is_not_trusted(tmp_path, caplog):
    root = make_data_root(tmp_path / "data", n=4)
    cache = ScoreCache(tmp_path / "scores")
    score(root, ["sugarcrepe"], cache)
    entry, = (tmp_path / "scores").glob("*.json")
    data = json.loads(entry.read_text())
    data["key"]["model"]["pretrained"] = "other"
    entry.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        scorer, _ = score(root, ["sugarcrepe"], cache)
    assert scorer.calls > 0 and "it holds another key" in caplog.text


def test_models_without_identity_are_not_cached(tmp_path):
    root = make_data_root(tmp_path / "data", n=4)
    cache = ScoreCache(tmp_path / "scores")
    score(root, ["visla"], cache, None)
    again, _ = score(root, ["visla"], cache, None)
    assert again.calls > 0 and not (tmp_path / "scores").exists()
    assert model_identity("ViT-B-32", None, "auto", "fp32", "cpu") is None  # random weights
    assert model_identity("ViT-B-32", str(tmp_path), "auto", "fp32", "cpu") is None  # a weights folder
    assert model_identity("hf-hub:org/repo", None, "auto", "fp32", "cpu") is None
    assert model_identity("ViT-B-32", "openai", "auto", "fp32", "cpu")["pretrained"] == "openai"
