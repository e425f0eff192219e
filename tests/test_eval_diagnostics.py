"""The diagnostics (`visla_lexical`, `left_right`) against brute-force re-computations.

Small data roots are written here in the real on-disk formats. A lookup scorer gives exact
embeddings (entries 0, +-1, +-1/2, so ties are real ties): texts by a hash, images by their one
colour (images are single-coloured, or single-coloured inside the ARO crop box, so a missing crop
fails loudly). Every reported number is recomputed with plain loops, a recursive word-level
Levenshtein and explicit cosines; each test also checks that the rule it pins (reordering, tie
handling, crop, tie-break, distinct-caption counting, position words) changes the answer on its
data, so that a wrong rule would really fail it.
"""
import json
import math
import random
import zlib
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest
import torch
from PIL import Image

from compclip.eval.api import run
from compclip.eval.checksums import mark_local
from compclip.eval.scorer import Scorer, TextScorer

POOL = [list(v) for v in np.eye(4)] + [[.5, .5, .5, .5], [.5, -.5, .5, -.5], [.5, .5, -.5, -.5], [-.5, .5, .5, -.5]]
COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255), (255, 0, 255),
           (128, 128, 128), (255, 255, 255)]
LEFT, RIGHT = "to the left of", "to the right of"


def vec_text(t):
    return POOL[zlib.crc32(t.encode()) % len(POOL)]


def vec_colour(rgb):
    return POOL[COLOURS.index(tuple(rgb))]


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def cos(u, v):
    return dot(u, v) / (math.sqrt(dot(u, u)) * math.sqrt(dot(v, v)))


class Lookup(Scorer):
    name = "lookup"

    def __init__(self):
        self.texts = []

    def encode_texts(self, texts):
        self.texts += list(texts)
        return torch.tensor([vec_text(t) for t in texts], dtype=torch.float32)

    def encode_images(self, images):
        out = []
        for im in images:
            colours = im.convert("RGB").getcolors()
            assert len(colours) == 1, "the image (or its crop box) must be one colour"
            out.append(vec_colour(colours[0][1]))
        return torch.tensor(out, dtype=torch.float32)


class TextOnly(TextScorer):
    name = "text"

    def encode_texts(self, texts):
        return torch.tensor([vec_text(t) for t in texts], dtype=torch.float32)


# ------------------------------------------------------------------------------ visla_lexical

def tokens(text):
    """Lower-cased words: punctuation other than the apostrophe separates words."""
    return "".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split()


def levenshtein(a, b):
    """Edit distance over word tuples, by the textbook recursion."""
    @lru_cache(maxsize=None)
    def d(i, j):  # distance between a[i:] and b[j:]
        if i == len(a):
            return len(b) - j
        if j == len(b):
            return len(a) - i
        if a[i] == b[j]:
            return d(i + 1, j + 1)
        return 1 + min(d(i + 1, j), d(i, j + 1), d(i + 1, j + 1))
    return d(0, 0)


VOCAB = ["a", "the", "dog", "cat", "red", "blue", "sits", "runs", "on", "under", "mat", "table", "two", "big"]
HAND_ROWS = [  # (P1, P2, N): hand-checked distances d(P1,N), d(P2,N)
    ("A dog sits on the red mat.", "a cat sits on the mat", "A cat sits on a mat."),  # 3 > 1: swap
    ("two dogs run", "two cats run", "two birds run"),  # 1 = 1: tie, stored order kept
    ("The Dog, runs.", "the dog walks", "the dog runs"),  # 0 < 1 only after lower-casing and punctuation
    ("a red car", "a red car parked", "a blue car"),  # 1 < 2: kept
]


def _words_to_text(ws, rng):
    text = " ".join(ws)
    if rng.random() < 0.5:
        text = text[0].upper() + text[1:]
    return text + ("." if rng.random() < 0.5 else "")


def _edit(ws, k, rng):
    ws = list(ws)
    for _ in range(k):
        op = rng.randrange(3)
        if op == 0:
            ws[rng.randrange(len(ws))] = rng.choice(VOCAB)
        elif op == 1 or len(ws) < 2:
            ws.insert(rng.randrange(len(ws) + 1), rng.choice(VOCAB))
        else:
            del ws[rng.randrange(len(ws))]
    return ws


def _random_rows(rng, n):
    rows = []
    for _ in range(n):
        base = [rng.choice(VOCAB) for _ in range(rng.randint(3, 7))]
        p1, p2, n = (_edit(base, rng.randint(lo, 2), rng) for lo in (0, 0, 1))
        rows.append(tuple(_words_to_text(ws, rng) for ws in (p1, p2, n)))
    return rows


@pytest.fixture(scope="module")
def visla_root(tmp_path_factory):
    """Generic: the hand rows + 40 random ones; spatial: 30 random ones and one with an empty N."""
    root = tmp_path_factory.mktemp("diag") / "data"
    (root / "visla" / "images").mkdir(parents=True)
    for i, rgb in enumerate(COLOURS):
        Image.new("RGB", (8, 8), rgb).save(root / "visla" / "images" / f"c{i}.png")
    rng = random.Random(7)
    subsets = {"generic": HAND_ROWS + _random_rows(rng, 40), "spatial": _random_rows(rng, 30)}
    table = {}
    for subset, rows in subsets.items():
        table[subset] = [(f"c{rng.randrange(len(COLOURS))}.png", *r) for r in rows]
    header = {"generic": ["filename", "caption", "second positive", "negative_caption"],
              "spatial": ["image", "sent1", "sent2", "Best reference (Semantically close)",
                          "Reference-2 (Completely irrelevant)"]}
    for subset, file in (("generic", "Generic_VISLA.tsv"), ("spatial", "Spatial_VISLA.tsv")):
        lines = [header[subset]] + [list(r) + (["a pizza"] if subset == "spatial" else []) for r in table[subset]]
        if subset == "spatial":
            lines.append(["c0.png", "a dog", "the dog", "", ""])  # empty N: dropped by the reader
        (root / "visla" / file).write_text("\r\n".join("\t".join(x) for x in lines), encoding="utf-8")
    mark_local(root, "tests")  # hand-made files under the published names
    return root, table


def lexical_brute_force(rows, with_images, rule="documented"):
    """The documented metrics; `rule` = 'never_swap' / 'swap_on_tie' gives the wrong variants."""
    acc = {k: [] for k in ("close_n", "far_n", "close_t2t", "far_t2t", "close_is_p1")}
    d_close, d_far = [], []
    for image, p1, p2, n in rows:
        d1, d2 = levenshtein(tuple(tokens(p1)), tuple(tokens(n))), levenshtein(tuple(tokens(p2)), tuple(tokens(n)))
        swap = {"documented": d2 < d1, "never_swap": False, "swap_on_tie": d2 <= d1}[rule]
        close, far = (p2, p1) if swap else (p1, p2)
        ec, ef, en = vec_text(close), vec_text(far), vec_text(n)
        if with_images:
            im = vec_colour(COLOURS[int(image[1:-4])])
            acc["close_n"].append(cos(im, ec) > cos(im, en))
            acc["far_n"].append(cos(im, ef) > cos(im, en))
        acc["close_t2t"].append(cos(ec, ef) > cos(ec, en))
        acc["far_t2t"].append(cos(ec, ef) > cos(ef, en))
        acc["close_is_p1"].append(d1 <= d2)
        d_close.append(min(d1, d2))
        d_far.append(max(d1, d2))
    out = {k: sum(v) / len(v) for k, v in acc.items() if v}
    return out, {"n": len(rows), "mean_dist_close": sum(d_close) / len(rows),
                 "mean_dist_far": sum(d_far) / len(rows)}


def test_word_levenshtein_on_hand_rows():
    """The hand rows' distances, checked by hand, through the module's tokeniser and DP."""
    from compclip.eval.benchmarks.diagnostics import word_edit_distance, words
    expected = [(3, 1), (1, 1), (0, 1), (1, 2)]
    for (p1, p2, n), (d1, d2) in zip(HAND_ROWS, expected):
        assert levenshtein(tuple(tokens(p1)), tuple(tokens(n))) == d1
        assert levenshtein(tuple(tokens(p2)), tuple(tokens(n))) == d2
        assert word_edit_distance(words(p1), words(n)) == d1
        assert word_edit_distance(words(p2), words(n)) == d2
    rng = random.Random(1)
    for _ in range(300):
        a = [rng.choice(VOCAB[:5]) for _ in range(rng.randint(0, 6))]
        b = [rng.choice(VOCAB[:5]) for _ in range(rng.randint(0, 6))]
        assert word_edit_distance(a, b) == levenshtein(tuple(a), tuple(b)), (a, b)


def test_visla_lexical_matches_brute_force(visla_root):
    root, table = visla_root
    result = run(Lookup(), ["visla_lexical"], str(root), progress=False)["visla_lexical"]
    expected_keys = set()
    for subset, rows in table.items():
        want, extra = lexical_brute_force(rows, with_images=True)
        for metric, value in want.items():
            assert result.headline[f"{subset}/{metric}"] == pytest.approx(value), (subset, metric)
            assert result.categories[subset][metric] == pytest.approx(value), (subset, metric)
            expected_keys.add(f"{subset}/{metric}")
        for k, v in extra.items():
            assert result.categories[subset][k] == pytest.approx(v), (subset, k)
        assert result.counts[subset] == len(rows)
        # the data exercise both rules: a reordering swaps some triplets, ties keep the stored order
        dists = [(levenshtein(tuple(tokens(p1)), tuple(tokens(n))), levenshtein(tuple(tokens(p2)), tuple(tokens(n))))
                 for _, p1, p2, n in rows]
        assert any(d2 < d1 for d1, d2 in dists) and any(d1 == d2 for d1, d2 in dists)
        for wrong in ("never_swap", "swap_on_tie"):
            assert lexical_brute_force(rows, True, wrong)[0] != want, (subset, wrong)
    assert set(result.headline) == expected_keys
    assert result.counts["spatial"] == 30  # the empty-N row was dropped
    assert result.categories["generic"]["close_is_p1"] < 1.0  # the hand swap row at least


def test_visla_lexical_hand_rows_one_by_one(tmp_path):
    """Each hand row alone: the swap row really reports P2 as the close positive, the tie row and
    the punctuation row keep P1; text-only scoring reports the T2T halves and close_is_p1 only."""
    (tmp_path / "visla" / "images").mkdir(parents=True)
    Image.new("RGB", (8, 8), COLOURS[4]).save(tmp_path / "visla" / "images" / "c4.png")
    mark_local(tmp_path, "tests")
    for (p1, p2, n), keeps_p1 in zip(HAND_ROWS, [False, True, True, True]):
        for name, cols in (("Generic_VISLA.tsv", "filename\tcaption\tsecond positive\tnegative_caption"),
                           ("Spatial_VISLA.tsv", "image\tsent1\tsent2\tBest reference (Semantically close)")):
            (tmp_path / "visla" / name).write_text(f"{cols}\r\nc4.png\t{p1}\t{p2}\t{n}")
        r = run(Lookup(), ["visla_lexical"], str(tmp_path), options={"visla_lexical": {"subsets": ["generic"]}},
                progress=False, reuse=False)["visla_lexical"].headline
        close, far = (p1, p2) if keeps_p1 else (p2, p1)
        im = vec_colour(COLOURS[4])
        assert r["generic/close_is_p1"] == float(keeps_p1)
        assert r["generic/close_n"] == float(cos(im, vec_text(close)) > cos(im, vec_text(n)))
        assert r["generic/far_n"] == float(cos(im, vec_text(far)) > cos(im, vec_text(n)))
        assert r["generic/close_t2t"] == float(cos(vec_text(close), vec_text(far)) > cos(vec_text(close), vec_text(n)))
        assert r["generic/far_t2t"] == float(cos(vec_text(close), vec_text(far)) > cos(vec_text(far), vec_text(n)))
        text = run(TextOnly(), ["visla_lexical"], str(tmp_path), options={"visla_lexical": {"subsets": ["generic"]}},
                   progress=False, reuse=False)["visla_lexical"]
        assert set(text.headline) == {"generic/close_t2t", "generic/far_t2t", "generic/close_is_p1"}
        assert all(text.headline[k] == r[k] for k in text.headline)
        assert any("text-only" in note for note in text.notes)


def test_visla_lexical_text_only_matches_brute_force(visla_root):
    root, table = visla_root
    result = run(TextOnly(), ["visla_lexical"], str(root), progress=False)["visla_lexical"]
    for subset, rows in table.items():
        want, _ = lexical_brute_force(rows, with_images=False)
        assert set(want) == {"close_t2t", "far_t2t", "close_is_p1"}
        for metric, value in want.items():
            assert result.headline[f"{subset}/{metric}"] == pytest.approx(value), (subset, metric)


# --------------------------------------------------------------------------------- left_right

# distinct VG-Relation true captions "the X is REL the Y"; the last one is stored 5 times over
VG_TRIPLES = [
    ("dog", LEFT, "cat"), ("dog", RIGHT, "horse"), ("dog", "on", "table"), ("dog", "on top of", "plate"),
    ("dog", "in front of", "bowl"), ("cat", LEFT, "horse"), ("cat", RIGHT, "table"), ("cat", "above", "dog"),
    ("horse", LEFT, "table"), ("horse", "in front of", "plate"), ("table", RIGHT, "plate"),
    ("cat", LEFT, "bowl"), ("lamp", RIGHT, "bowl")]
REPEATS = 5
QUADRANTS = [(0, 0), (32, 0), (0, 32), (32, 32)]


def vg_caption(x, rel, y):
    return f"the {x} is {rel} the {y}"


@pytest.fixture(scope="module")
def vg_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("diag_vg") / "data"
    (root / "aro" / "images").mkdir(parents=True)
    quadrant_colour = {}
    for k in range(2):  # two 64 px images, each of four single-coloured 32 px quadrants
        im = Image.new("RGB", (64, 64))
        for q, (x, y) in enumerate(QUADRANTS):
            rgb = COLOURS[4 * k + q]
            im.paste(rgb, (x, y, x + 32, y + 32))
            quadrant_colour[(f"{k}.png", q)] = rgb
        im.save(root / "aro" / "images" / f"{k}.png")
    rng = random.Random(5)
    items = []
    for i, triple in enumerate(VG_TRIPLES + [VG_TRIPLES[-1]] * (REPEATS - 1)):
        x, rel, y = triple
        true = vg_caption(x, rel, y)
        false = true if i in (1, 6) else vg_caption(y, rel, x)  # two exact ties: ARO counts them wrong
        boxes = sorted(quadrant_colour)  # every other item gets the box that favours its true caption
        image, q = max(boxes, key=lambda b: dot(vec_colour(quadrant_colour[b]), vec_text(true))
                       - dot(vec_colour(quadrant_colour[b]), vec_text(false))) if i % 2 else rng.choice(boxes)
        items.append({"image_id": i, "image_path": image, "bbox_x": QUADRANTS[q][0], "bbox_y": QUADRANTS[q][1],
                      "bbox_w": 32, "bbox_h": 32, "relation_name": rel, "true_caption": true,
                      "false_caption": false, "colour": quadrant_colour[(image, q)]})
    (root / "aro" / "visual_genome_relation.json").write_text(json.dumps(
        [{k: v for k, v in it.items() if k != "colour"} for it in items]))
    return root, items


def top_nouns(triples, n, distinct=True, position_words=False):
    """Nouns counted from the construction of the captions (X and Y of each caption)."""
    counts = Counter()
    for x, rel, y in (dict.fromkeys(triples) if distinct else triples):
        counts.update([x, y])
        if position_words:  # what a tagger reading "left" / "top" / "front" as nouns would add
            counts.update(w for w in rel.split() if w in ("left", "right", "top", "front"))
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def left_right_brute_force(nouns, n_pairs, seed):
    rng = np.random.default_rng(seed)
    pairs = [tuple(nouns[int(i)] for i in rng.choice(len(nouns), size=2, replace=False)) for _ in range(n_pairs)]
    cos_lr = [cos(vec_text(f"the {x} {LEFT} the {y}"), vec_text(f"the {x} {RIGHT} the {y}")) for x, y in pairs]
    cos_xy = [cos(vec_text(x), vec_text(y)) for x, y in pairs]
    return pairs, sum(cos_lr) / n_pairs, sum(cos_xy) / n_pairs


def test_left_right_matches_brute_force(vg_root):
    root, items = vg_root
    n_nouns, n_pairs, seed = 5, 40, 3
    scorer = Lookup()
    opts = {"left_right": {"n_nouns": n_nouns, "n_pairs": n_pairs, "seed": seed}}
    result = run(scorer, ["left_right"], str(root), options=opts, progress=False, reuse=False)["left_right"]

    # nouns: counted over distinct captions, ties alphabetical, position words left out
    triples = VG_TRIPLES + [VG_TRIPLES[-1]] * (REPEATS - 1)
    nouns = top_nouns(triples, n_nouns)
    assert nouns == ["dog", "cat", "horse", "table", "bowl"]  # bowl and plate tie at 3: alphabetical
    assert top_nouns(triples, n_nouns, distinct=False) != nouns  # lamp's repeats would count
    assert top_nouns(triples, n_nouns, position_words=True) != nouns  # "left" would be mined
    from compclip.eval.api import load_benchmark
    bench = load_benchmark("left_right", str(root), True, opts["left_right"])
    assert bench.nouns == nouns

    # accuracy: ARO's argmax over [false, true] on the cropped box; a tie picks false (wrong)
    correct = {LEFT: [], RIGHT: []}
    for it in items:
        if it["relation_name"] in correct:
            im = vec_colour(it["colour"])
            true, false = vec_text(it["true_caption"]), vec_text(it["false_caption"])
            correct[it["relation_name"]].append(cos(im, true) > cos(im, false))
    both = correct[LEFT] + correct[RIGHT]
    h = result.headline
    assert h["acc"] == pytest.approx(sum(both) / len(both))
    assert h["acc_left"] == pytest.approx(sum(correct[LEFT]) / len(correct[LEFT]))
    assert h["acc_right"] == pytest.approx(sum(correct[RIGHT]) / len(correct[RIGHT]))
    assert result.categories["left"]["n"] == len(correct[LEFT]) == 4
    assert result.categories["right"]["n"] == len(correct[RIGHT]) == 3 + REPEATS
    assert result.counts == {"items": len(both), "pairs": n_pairs}
    assert 0 < sum(both) < len(both)  # neither all right nor all wrong

    # cosines: the seeded pairs, explicit cosines
    pairs, cos_lr, cos_xy = left_right_brute_force(nouns, n_pairs, seed)
    assert all(x != y for x, y in pairs) and len(set(pairs)) > 5
    assert h["cos_left_right"] == pytest.approx(cos_lr, abs=1e-6)
    assert h["cos_random_nouns"] == pytest.approx(cos_xy, abs=1e-6)
    assert left_right_brute_force(nouns, n_pairs, seed + 1)[1:] != (cos_lr, cos_xy)  # the draw matters
    asked = {t for t in scorer.texts if LEFT in t and t.startswith("the ") and " is " not in t}
    assert asked == {f"the {x} {LEFT} the {y}" for x, y in pairs}
    assert result.categories["text"]["n_nouns"] == n_nouns and result.categories["text"]["n_pairs"] == n_pairs
    assert set(h) == {"acc", "acc_left", "acc_right", "cos_left_right", "cos_random_nouns"}


def test_left_right_without_vg_relation_mines_visla_text(tmp_path):
    """No ARO file: nouns from the VISLA P1 captions, cosines only, accuracy skipped with a note."""
    (tmp_path / "visla").mkdir()
    mark_local(tmp_path, "tests")
    p1s = ["the dog is on top of the table", "a cat sits to the left of a dog", "the horse is in front of the dog",
           "a cat and a horse", "the table is under the lamp"]
    rows = [f"x.jpg\t{p}\t{p} again\tsomething else" for p in p1s]
    (tmp_path / "visla" / "Generic_VISLA.tsv").write_text(
        "\r\n".join(["filename\tcaption\tsecond positive\tnegative_caption"] + rows))
    (tmp_path / "visla" / "Spatial_VISLA.tsv").write_text(
        "image\tsent1\tsent2\tBest reference (Semantically close)\r\ny.jpg\tthe lamp is above the cat\tb\t")
    r = run(TextOnly(), ["left_right"], str(tmp_path), options={"left_right": {"n_nouns": 3, "n_pairs": 30}},
            progress=False, reuse=False)["left_right"]
    # counts over the kept P1s (the spatial row has an empty N: dropped): dog 3, cat 2, horse 2, table 2, lamp 1
    nouns = ["dog", "cat", "horse"]
    _, cos_lr, cos_xy = left_right_brute_force(nouns, 30, 0)
    assert set(r.headline) == {"cos_left_right", "cos_random_nouns"}
    assert r.headline["cos_left_right"] == pytest.approx(cos_lr, abs=1e-6)
    assert r.headline["cos_random_nouns"] == pytest.approx(cos_xy, abs=1e-6)
    assert any("accuracy skipped" in n for n in r.notes) and any("not found" in n for n in r.notes)
