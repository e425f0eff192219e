"""Every benchmark end to end on a rendered fixture in the real on-disk formats.

A lookup scorer with tie-prone exact embeddings is checked against brute-force loops over the
raw files (read here independently of the loaders); the micro model runs every benchmark; an
encoder-call counter proves each unique text and image is encoded once per run.
"""
import json
import zlib
from collections import defaultdict

import numpy as np
import pytest
import torch

from compclip.eval.api import evaluate, run
from compclip.eval.benchmarks.aro import SYMMETRIC_RELATIONS
from compclip.eval.cache import EmbeddingCache
from compclip.eval.registry import list_benchmarks
from compclip.eval.scorer import OpenClipScorer, Scorer
from tests.fixtures.eval_data import make_data_root

POOL = [list(v) for v in np.eye(4)] + [[.5, .5, .5, .5], [.5, -.5, .5, -.5], [.5, .5, -.5, -.5], [-.5, .5, .5, -.5]]
ZS = {"zeroshot": {"datasets": ["cifar10", "cifar100"]}}  # no ImageNet folder in the fixture


def vec_text(t):
    return POOL[zlib.crc32(t.encode()) % 5]


def vec_image(im):
    return POOL[zlib.crc32(im.convert("RGB").tobytes()) % 5]


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


class LookupScorer(Scorer):
    """Deterministic exact embeddings; records every item it is asked to encode."""
    name = "lookup"

    def __init__(self):
        self.texts, self.images, self.calls = [], [], 0

    def encode_texts(self, texts):
        self.texts += list(texts)
        self.calls += 1
        return torch.tensor([vec_text(t) for t in texts], dtype=torch.float32)

    def encode_images(self, images):
        self.images += [im.convert("RGB").tobytes() for im in images]
        self.calls += 1
        return torch.tensor([vec_image(im) for im in images], dtype=torch.float32)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_data_root(tmp_path_factory.mktemp("synthetic") / "data", n=6, seed=3)


@pytest.fixture(scope="module")
def lookup_run(root):
    scorer = LookupScorer()
    cache = EmbeddingCache(scorer, batch_size=7, progress=False)
    results = run(cache, list_benchmarks(), str(root), options=ZS)
    scorer.cache = cache
    return scorer, results


def image_at(root, *parts, box=None):
    from PIL import Image
    for d in parts:
        if d.is_file():
            im = Image.open(d).convert("RGB")
            if box:
                x, y, w, h = box
                im = im.crop((x, y, x + w, y + h))
            return im
    raise FileNotFoundError(parts)


def read_tsv(path, cols):
    lines = path.read_bytes().decode().split("\r\n")
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
    return [[r[c] for c in cols] for r in rows if r[cols[3]].strip()]


def test_visla_and_sugarcrepe_pp_match_brute_force(root, lookup_run):
    _, results = lookup_run
    tables = {
        "generic": read_tsv(root / "visla/Generic_VISLA.tsv", ["filename", "caption", "second positive", "negative_caption"]),
        "spatial": read_tsv(root / "visla/Spatial_VISLA.tsv", ["image", "sent1", "sent2", "Best reference (Semantically close)"]),
    }
    for f in sorted((root / "sugarcrepe_pp").glob("*.json")):
        tables["scpp/" + f.stem] = [[r["filename"], r["caption"], r["caption2"], r["negative_caption"]]
                                    for r in json.loads(f.read_text())]
    ties = 0
    for subset, rows in tables.items():
        acc = defaultdict(list)
        for img, p1, p2, n in rows:
            im = vec_image(image_at(root, root / "visla/images" / img, root / "coco/val2017" / img))
            e1, e2, en = vec_text(p1), vec_text(p2), vec_text(n)
            ties += dot(im, e1) == dot(im, en)
            acc["i2t"].append(dot(im, e1) > dot(im, en) and dot(im, e2) > dot(im, en))
            acc["p1_n"].append(dot(im, e1) > dot(im, en))
            acc["p2_n"].append(dot(im, e2) > dot(im, en))
            acc["t2t"].append(dot(e1, e2) > dot(e1, en) and dot(e1, e2) > dot(e2, en))
            acc["t2t_p1_n"].append(dot(e1, e2) > dot(e1, en))
            acc["t2t_p2_n"].append(dot(e1, e2) > dot(e2, en))
        bench, key = ("sugarcrepe_pp", subset[5:]) if subset.startswith("scpp/") else ("visla", subset)
        for metric, values in acc.items():
            assert results[bench].headline[f"{key}/{metric}"] == pytest.approx(np.mean(values)), (subset, metric)
    assert ties > 0
    assert len(tables["spatial"]) == results["visla"].counts["spatial"] == 10


def test_sugarcrepe_matches_brute_force(root, lookup_run):
    _, results = lookup_run
    per = {}
    for f in sorted((root / "sugarcrepe").glob("*.json")):
        per[f.stem] = [dot(vec_image(image_at(root, root / "coco/val2017" / r["filename"])), vec_text(r["caption"]))
                       > dot(vec_image(image_at(root, root / "coco/val2017" / r["filename"])), vec_text(r["negative_caption"]))
                       for r in json.loads(f.read_text()).values()]
    h = results["sugarcrepe"].headline
    for s, v in per.items():
        assert h[s] == pytest.approx(np.mean(v))
    for kind in ("replace", "swap", "add"):
        assert h[kind] == pytest.approx(np.mean(sum((v for s, v in per.items() if s.startswith(kind)), [])))
    assert h["micro"] == pytest.approx(np.mean(sum(per.values(), [])))
    assert h["macro"] == pytest.approx(np.mean([np.mean(v) for v in per.values()]))


def test_bivlc_matches_brute_force(root, lookup_run):
    import datasets
    _, results = lookup_run
    ds = datasets.load_from_disk(str(root / "bivlc"))
    acc = defaultdict(lambda: defaultdict(list))
    for r in ds:
        i0, i1 = vec_image(r["image"]), vec_image(r["negative_image"])
        c0, c1 = vec_text(r["caption"]), vec_text(r["negative_caption"])
        m = {"i2t_pos": dot(c0, i0) > dot(c1, i0), "i2t_neg": dot(c1, i1) > dot(c0, i1),
             "t2i_pos": dot(c0, i0) > dot(c0, i1), "t2i_neg": dot(c1, i1) > dot(c1, i0)}
        m["i2t"], m["t2i"] = m["i2t_pos"] and m["i2t_neg"], m["t2i_pos"] and m["t2i_neg"]
        m["group"] = m["i2t"] and m["t2i"]
        for k, v in m.items():
            for cat in ("all", r["type"].lower(), f"{r['type'].lower()}/{r['subtype'].lower()}"):
                acc[cat][k].append(v)
    res = results["bivlc"]
    for k in acc["all"]:
        assert res.headline[k] == pytest.approx(np.mean(acc["all"][k]))
    for cat, table in acc.items():
        if cat != "all":
            assert res.categories[cat][k] == pytest.approx(np.mean(table[k]))
            assert res.categories[cat]["n"] == len(table[k])


def test_aro_vg_matches_brute_force(root, lookup_run):
    _, results = lookup_run
    h = results["aro"].headline
    for part, key in (("vg_relation", "relation_name"), ("vg_attribution", "attributes")):
        items = json.loads((root / f"aro/visual_genome_{part[3:]}.json").read_text())
        groups = defaultdict(list)
        for it in items:
            box = (it["bbox_x"], it["bbox_y"], it["bbox_w"], it["bbox_h"])
            im = vec_image(image_at(root, root / "aro/images" / it["image_path"], box=box))
            # argmax over [false, true]: correct only if true is strictly higher
            ok = dot(im, vec_text(it["true_caption"])) > dot(im, vec_text(it["false_caption"]))
            g = it[key] if part == "vg_relation" else "_".join(it[key])
            groups[g].append(ok)
        if part == "vg_relation":
            kept = [g for g in groups if g not in SYMMETRIC_RELATIONS]
            assert "next to" in groups and "next to" not in kept and "to the left of" in kept
        else:
            kept = [g for g in groups if len(groups[g]) >= 25]
            assert kept == ["red_blue"]
        assert h[f"{part}/macro"] == pytest.approx(np.mean([np.mean(groups[g]) for g in kept]))


def test_aro_order_tie_counts_as_correct(root):
    class Constant(LookupScorer):
        def encode_texts(self, texts):
            return torch.ones(len(texts), 4) / 2

        def encode_images(self, images):
            return torch.ones(len(images), 4) / 2
    r = run(Constant(), ["aro", "sugarcrepe", "bivlc", "visla"], str(root), progress=False)
    assert r["aro"].headline["coco_order/mean"] == 1.0 and r["aro"].headline["coco_order/std"] == 0.0
    assert r["aro"].headline["vg_relation/macro"] == 0.0  # [false, true] tie picks false
    assert r["sugarcrepe"].headline["macro"] == 0.0 and r["bivlc"].headline["i2t_pos"] == 0.0
    assert r["visla"].headline["generic/t2t"] == 0.0


def test_each_unique_text_and_image_encoded_once(lookup_run):
    scorer, results = lookup_run
    assert len(scorer.texts) == len(set(scorer.texts)) > 100
    # one encoding per image reference (file + crop box, dataset row + column, array index);
    # BiVLC rows whose negative image equals the positive are distinct references, same pixels
    assert len(scorer.images) == len(scorer.cache._images) > 20
    keys = list(scorer.cache._images)
    assert sum(k[0] == "file" for k in keys) == len(set(
        im for im, k in zip(scorer.images, keys) if k[0] == "file"))
    assert scorer.calls < len(scorer.texts) / 3  # batched (batch_size=7), not one call per item
    assert all(r.headline for r in results.values())


def test_micro_model_runs_every_benchmark(root, micro_model):
    scorer = OpenClipScorer.from_loaded(micro_model, batch_size=16)
    options = {"zeroshot": {"datasets": ["cifar10", "cifar100"], "templates": "simple"},
               "left_right": {"n_pairs": 50}}
    flat = evaluate(scorer, list_benchmarks(), str(root), options=options, progress=False)
    for prefix in ("visla/generic/i2t", "visla/spatial/t2t", "sugarcrepe/macro", "sugarcrepe_pp/macro/i2t",
                   "bivlc/group", "aro/vg_relation/macro", "aro/vg_attribution/macro", "aro/coco_order/mean",
                   "aro/flickr30k_order/std", "retrieval/coco/i2t_r1", "retrieval/flickr30k/t2i_r10",
                   "zeroshot/cifar10/top1", "zeroshot/cifar100/top5", "visla_lexical/generic/close_n",
                   "left_right/cos_left_right", "left_right/acc_left"):
        assert prefix in flat, prefix
    lr = {k: v for k, v in flat.items() if not k.startswith("left_right/cos") and not k.endswith("/std")}
    assert all(0.0 <= v <= 1.0 for v in lr.values())


def test_text_only_scorer_skips_image_benchmarks(root):
    from compclip.eval.scorer import TextScorer

    class Text(TextScorer):
        name = "text"
        def encode_texts(self, texts):
            return torch.tensor([vec_text(t) for t in texts], dtype=torch.float32)
    r = run(Text(), ["visla", "sugarcrepe_pp", "sugarcrepe", "aro"], str(root), progress=False)
    assert set(r["visla"].headline) == {"generic/t2t", "spatial/t2t", "generic/t2t_p1_n", "spatial/t2t_p1_n", "generic/t2t_p2_n", "spatial/t2t_p2_n"}
    assert "skipped" in r["sugarcrepe"].notes[0] and r["aro"].headline == {}
    # the image-scorer run and the text-only run agree on T2T
    assert r["sugarcrepe_pp"].headline["all/t2t"] == run(LookupScorer(), ["sugarcrepe_pp"], str(root), progress=False)["sugarcrepe_pp"].headline["all/t2t"]


def test_minilm_text_scorer_t2t_matches_brute_force(root):
    from compclip.eval.scorer import SentenceTransformerScorer
    scorer = SentenceTransformerScorer.minilm(batch_size=32)
    r = run(scorer, ["visla", "bivlc"], str(root), progress=False)
    assert "skipped" in r["bivlc"].notes[0] and set(r["visla"].headline) == {"generic/t2t", "spatial/t2t", "generic/t2t_p1_n", "spatial/t2t_p1_n", "generic/t2t_p2_n", "spatial/t2t_p2_n"}
    rows = read_tsv(root / "visla/Generic_VISLA.tsv", ["filename", "caption", "second positive", "negative_caption"])
    e = [scorer.encode_texts(list(row[1:])) for row in rows]
    assert all(torch.allclose(x.norm(dim=-1), torch.ones(3), atol=1e-5) for x in e)
    ok = [bool((x[0] @ x[1] > x[0] @ x[2]) and (x[0] @ x[1] > x[1] @ x[2])) for x in e]
    assert r["visla"].headline["generic/t2t"] == pytest.approx(np.mean(ok))


def test_retrieval_under_aro_perturbations(root):
    from compclip.eval.images import FileImage, ShuffledImage
    scorer = LookupScorer()
    base = run(scorer, ["retrieval"], str(root), progress=False)["retrieval"]
    opts = {"retrieval": {"text_perturb": "shuffle_trigrams", "image_perturb": "shuffle_patches_9", "seed": 1}}
    shuffled = run(LookupScorer(), ["retrieval"], str(root), options=opts, progress=False)["retrieval"]
    assert set(shuffled.headline) == set(base.headline)
    ref = FileImage(str(next((root / "aro/coco_images/val2014").iterdir())))
    a, b = ShuffledImage(ref, "shuffle_patches_9", 1).open(), ref.open()
    assert a.size[0] <= b.size[0] and sorted(np.asarray(a).reshape(-1, 3).tolist()) == \
        sorted(np.asarray(b.crop((0, 0) + a.size)).reshape(-1, 3).tolist())  # same pixels, moved
    with pytest.raises(ValueError, match="text_perturb must be one of"):
        run(LookupScorer(), ["retrieval"], str(root), options={"retrieval": {"text_perturb": "x"}}, progress=False)
