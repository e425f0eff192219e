"""A tiny data root in every benchmark's real on-disk format, for tests and `bench/bench_eval.py`.

`make_data_root(root)` renders small PIL images and writes VISLA TSVs (CRLF, spatial rows with an
empty negative), SugarCrepe JSON objects (ids with a gap), SugarCrepe++ JSON lists, a BiVLC
dataset via `datasets.Dataset.save_to_disk`, ARO's VG JSON with boxes and Karpathy-style Order
files, the retrieval copies and CIFAR-style pickles (a dict of lists and a uint8 numpy array, pickle
protocol 4: no globals beyond numpy's array reconstruction, as the official files). Captions come
from a small vocabulary and some negatives equal their positive word for word, so exact score
ties occur. The root is marked as local data (`eval.checksums.mark_local`), so its files, named
as the published ones, are not compared with the published files' pinned sha256.
"""
from __future__ import annotations

import json
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from eval.checksums import mark_local

COLORS = ["red", "blue", "green", "yellow", "black", "white"]
NOUNS = ["dog", "cat", "horse", "table", "car", "tree", "man", "woman"]
RELS = ["on", "under", "behind", "to the left of", "to the right of", "next to", "near"]


def _image(rng: random.Random, size: int) -> Image.Image:
    im = Image.new("RGB", (size, size), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(im)
    for _ in range(3):
        x, y = rng.randrange(size - 8), rng.randrange(size - 8)
        draw.rectangle([x, y, x + rng.randrange(4, size // 2), y + rng.randrange(4, size // 2)],
                       fill=tuple(rng.randrange(256) for _ in range(3)))
    return im


def _caption(rng: random.Random) -> tuple[str, str, str, str]:
    c1, c2 = rng.sample(COLORS, 2)
    n1, n2 = rng.sample(NOUNS, 2)
    return c1, n1, c2, n2


def _triplet(rng: random.Random) -> tuple[str, str, str]:
    c1, n1, c2, n2 = _caption(rng)
    rel = rng.choice(RELS)
    p1 = f"A {c1} {n1} is {rel} a {c2} {n2}."
    p2 = f"There is a {c2} {n2}, and the {c1} {n1} is {rel} it."
    kind = rng.randrange(3)
    n = (f"A {c2} {n1} is {rel} a {c1} {n2}." if kind == 0 else
         f"A {c2} {n2} is {rel} a {c1} {n1}." if kind == 1 else p1)  # kind 2: exact tie with P1
    return p1, p2, n


def make_data_root(root: str | Path, n: int = 6, seed: int = 0, size: int = 40) -> Path:
    """Write the fixture under `root` (created; an existing one is replaced); returns the path."""
    root = Path(root)
    if root.exists():
        shutil.rmtree(root)
    rng = random.Random(seed)
    coco = root / "coco" / "val2017"
    coco.mkdir(parents=True)
    names = [f"{i:012d}.jpg" for i in range(n)]
    for name in names:
        _image(rng, size).save(coco / name, quality=95)

    # VISLA: generic images in coco/val2017, spatial ones in visla/images (both lookup paths).
    (root / "visla" / "images").mkdir(parents=True)
    spatial_names = [f"s{i:011d}.jpg" for i in range(n)]
    for name in spatial_names:
        _image(rng, size).save(root / "visla" / "images" / name)
    rows = ["filename\tcaption\tsecond positive\tnegative_caption"]
    rows += ["\t".join([rng.choice(names), *_triplet(rng)]) for _ in range(n * 2)]
    (root / "visla" / "Generic_VISLA.tsv").write_bytes("\r\n".join(rows).encode())
    rows = ["image\tsent1\tsent2\tBest reference (Semantically close)\tReference-2 (Completely irrelevant)"]
    for i in range(n * 2):
        p1, p2, neg = _triplet(rng)
        rows.append("\t".join([rng.choice(spatial_names), p1, p2, "" if i % 5 == 4 else neg,
                               "" if i % 5 == 4 else "A pizza is in the oven."]))
    (root / "visla" / "Spatial_VISLA.tsv").write_bytes("\r\n".join(rows).encode())

    # SugarCrepe: objects keyed by string ids with a gap; SugarCrepe++: lists with caption2.
    from eval.benchmarks.sugarcrepe import SUBSETS as SC
    from eval.benchmarks.sugarcrepe_pp import SUBSETS as SCPP
    (root / "sugarcrepe").mkdir()
    (root / "sugarcrepe_pp").mkdir()
    for s in SC:
        items = {}
        for i in range(n):
            p1, _, neg = _triplet(rng)
            items[str(i if i < 2 else i + 1)] = {"filename": rng.choice(names), "caption": p1, "negative_caption": neg}
        (root / "sugarcrepe" / f"{s}.json").write_text(json.dumps(items, indent=4))
    for s in SCPP:
        items = []
        for i in range(n):
            p1, p2, neg = _triplet(rng)
            items.append({"id": i, "filename": rng.choice(names), "caption": p1, "caption2": p2, "negative_caption": neg})
        (root / "sugarcrepe_pp" / f"{s}.json").write_text(json.dumps(items, indent=1))

    _write_bivlc(root / "bivlc", rng, n, size)
    _write_aro(root, rng, n, size)
    _write_cifar(root / "zeroshot", rng, n)
    mark_local(root, "eval.synthetic")
    return root


def _write_bivlc(folder: Path, rng: random.Random, n: int, size: int) -> None:
    import datasets
    rows = {"image": [], "caption": [], "negative_caption": [], "negative_image": [], "type": [], "subtype": []}
    kinds = [("Replace", "Object"), ("Replace", "Relation"), ("Swap", "Attribute"), ("Add", "Object")]
    for i in range(n * 2):
        p1, _, neg = _triplet(rng)
        t, s = kinds[i % len(kinds)]
        rows["image"].append(_image(rng, size))
        rows["negative_image"].append(_image(rng, size) if i % 4 else rows["image"][-1])  # some identical images
        rows["caption"].append(p1)
        rows["negative_caption"].append(neg)
        rows["type"].append(t)
        rows["subtype"].append(s)
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string"),
                                  "negative_caption": datasets.Value("string"), "negative_image": datasets.Image(),
                                  "type": datasets.Value("string"), "subtype": datasets.Value("string")})
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(folder))


def _write_aro(root: Path, rng: random.Random, n: int, size: int) -> None:
    aro = root / "aro"
    (aro / "images").mkdir(parents=True)
    vg_names = [f"{2400000 + i}.jpg" for i in range(n)]
    for name in vg_names:
        _image(rng, size * 2).save(aro / "images" / name)

    def box():
        x, y = rng.randrange(size), rng.randrange(size)
        return {"bbox_x": x, "bbox_y": y, "bbox_w": rng.randrange(8, size), "bbox_h": rng.randrange(8, size)}

    rel = []
    for i in range(n * 4):
        c1, n1, c2, n2 = _caption(rng)
        r = RELS[i % len(RELS)]
        true = f"the {n1} is {r} the {n2}"
        false = f"the {n2} is {r} the {n1}" if i % 6 else true  # some exact ties
        rel.append({"image_id": i, "image_path": rng.choice(vg_names), **box(), "relation_name": r,
                    "true_caption": true, "false_caption": false})
    (aro / "visual_genome_relation.json").write_text(json.dumps(rel))
    att = []
    for i in range(40):
        a = ["red", "blue"] if i < 30 else ["big", "small"]  # 30 >= 25 kept, 10 < 25 dropped
        n1, n2 = rng.sample(NOUNS, 2)
        true = f"the {a[0]} {n1} and the {a[1]} {n2}"
        att.append({"image_id": i, "image_path": rng.choice(vg_names), **box(), "attributes": a,
                    "true_caption": true, "false_caption": f"the {a[1]} {n1} and the {a[0]} {n2}" if i % 7 else true})
    (aro / "visual_genome_attribution.json").write_text(json.dumps(att))

    for folder, prefix, file in (("coco_images", "val2014/COCO_val2014_", "coco_karpathy_test.json"),
                                 ("flickr30k_images", "flickr30k-images/", "flickr30k_test.json")):
        ann = []
        for i in range(n):
            rel_path = f"{prefix}{i:012d}.jpg"
            (aro / folder / rel_path).parent.mkdir(parents=True, exist_ok=True)
            _image(rng, size).save(aro / folder / rel_path)
            ann.append({"image": rel_path, "caption": [_triplet(rng)[0] for _ in range(2)] + ["A dog."]})
        (aro / file).write_text(json.dumps(ann))
        (root / "retrieval").mkdir(exist_ok=True)
        shutil.copy(aro / file, root / "retrieval" / file)  # images found through aro/<folder>


def _write_cifar(folder: Path, rng: random.Random, n: int) -> None:
    gen = np.random.default_rng(rng.randrange(2 ** 31))
    for sub, data_file, meta_file, label_key, names_key, k in (
            ("cifar-10-batches-py", "test_batch", "batches.meta", "labels", "label_names", 10),
            ("cifar-100-python", "test", "meta", "fine_labels", "fine_label_names", 100)):
        (folder / sub).mkdir(parents=True)
        data = {"data": gen.integers(0, 256, (n * 2, 3 * 32 * 32), dtype=np.uint8),
                label_key: [int(x) for x in gen.integers(0, k, n * 2)]}
        with open(folder / sub / data_file, "wb") as f:
            pickle.dump(data, f, protocol=4)
        with open(folder / sub / meta_file, "wb") as f:
            pickle.dump({names_key: [f"class_{j}" for j in range(k)]}, f, protocol=4)
