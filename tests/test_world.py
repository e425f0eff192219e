"""The synthetic world: grammar round trip, parser errors, rendering, geometry, object bank."""
import random

import numpy as np
import pytest

from compclip.datagen.world import (Obj, ParseError, PlacementError, Rel, Scene, Style, all_styles, describe,
                           object_masks, parse, random_scene, render_caption, render_scene,
                           satisfies, write_object_bank)
from compclip.datagen.world.edits import KINDS, candidates, negatives
from compclip.datagen.world.grammar import TEMPLATES
from compclip.datagen.world.layout import MARGIN, SLOPE
from compclip.datagen.world.vocab import COLOURS, RELATION_PHRASES, SHAPES


def _scenes():
    """Scenes of every structure the templates cover: 1, 2 and 3 objects, related or not."""
    rng = random.Random(0)
    out = [Scene((Obj("circle", "red", "small"),))]
    for n, related, third in [(2, True, None), (2, False, None), (3, True, True), (3, True, False),
                              (3, False, True), (3, False, False)]:
        for _ in range(3):
            out.append(random_scene(rng, n, related=related, third_related=third))
    return out


def test_round_trip_every_template_and_style():
    styles = all_styles()
    assert {s.template for s in styles} == set(TEMPLATES)
    for scene in _scenes():
        captions = set()
        for style in styles:
            caption = describe(scene, style)
            back = parse(caption)
            assert back.same_as(scene), (caption, scene, back)
            captions.add(caption)
        if scene.relations:
            assert len(captions) > 20  # the styles really word the scene differently


def test_every_relation_phrase_parses_to_its_relation():
    for rel, phrases in RELATION_PHRASES.items():
        for phrase in phrases:
            scene = parse(f"a red circle {phrase} a blue square")
            assert scene.relations == (Rel(0, rel, 1),)


def test_paraphrases_are_the_same_scene():
    a = parse("a red circle to the left of a blue square")
    b = parse("A blue square is to the right of a red circle.")
    c = parse("there is a blue square right of a red circle")
    assert a.same_as(b) and a.same_as(c)
    assert not a.same_as(parse("a blue square to the left of a red circle"))
    assert parse("a big red circle").same_as(parse("a large red circle"))
    # "the" refers back to an earlier object
    s = parse("a red circle left of a blue square and a green star above the blue square")
    assert len(s.objects) == 3 and Rel(2, "above", 1) in s.relations


@pytest.mark.parametrize("caption,unreadable", [
    ("a red circle near a blue square", "near a blue square"),
    ("a pink circle", "pink circle"),
    ("red circle left of a blue square", "red circle left of a blue square"),
    ("a red circle to the left", "to the left"),
    ("a red circle and", "<end of caption>"),
    ("a red circle left of the red circle", "<end of caption>"),
    ("two red circles", "two red circles"),
    ("a red circle; a blue square", "a red circle; a blue square"),
    ("", "<end of caption>"),
    ("a man riding a horse", "man riding a horse"),
])
def test_out_of_grammar_captions_raise_parse_error(caption, unreadable):
    with pytest.raises(ParseError) as err:
        parse(caption)
    assert isinstance(err.value, ValueError)
    assert err.value.unreadable == unreadable
    assert repr(caption) in str(err.value)
    with pytest.raises(ParseError):
        render_caption(caption)


def test_contradictory_caption_is_reported():
    with pytest.raises(PlacementError):
        render_caption("a red circle left of a blue square and the blue square left of the red circle")


def test_renders_are_deterministic_and_seed_dependent():
    cap = "a small red circle to the left of a large blue square"
    a, b = render_caption(cap, 64, 7), render_caption(cap, 64, 7)
    assert a.size == (64, 64) and a.mode == "RGB"
    assert a.tobytes() == b.tobytes()
    assert render_caption(cap, 64, 8).tobytes() != a.tobytes()
    assert render_caption(cap, 96, 7).size == (96, 96)


def _erode(mask):
    return mask & np.roll(mask, 1, 0) & np.roll(mask, -1, 0) & np.roll(mask, 1, 1) & np.roll(mask, -1, 1)


def _centroid(mask):
    ys, xs = np.nonzero(mask)
    return xs.mean(), ys.mean()


@pytest.mark.parametrize("relation", ["left", "right", "above", "below"])
def test_relation_holds_in_rendered_pixels(relation):
    """Object masks' centroids satisfy the stated relation (with margin), for many seeds; and
    the pixels inside each mask really carry the object's colour."""
    rng = random.Random(relation)
    xs_seen = set()
    for seed in range(40):
        scene = random_scene(rng, 2)
        scene = Scene(scene.objects, (Rel(0, relation, 1),))
        image, layout = render_scene(scene, 64, seed)
        masks = object_masks(layout)
        (ax, ay), (bx, by) = _centroid(masks[0]), _centroid(masks[1])
        dx, dy = bx - ax, by - ay
        on, off = {"left": (dx, dy), "right": (-dx, dy), "above": (dy, dx), "below": (-dy, dx)}[relation]
        assert on >= MARGIN * 64 - 1.5 and abs(off) <= SLOPE * on + 1.5, (seed, scene, on, off)
        assert not (masks[0] & masks[1]).any()
        pixels = np.asarray(image)
        for obj, mask in zip(scene.objects, masks):
            inner = _erode(_erode(mask))
            inner = inner if inner.sum() >= 3 else _erode(mask)
            mean = pixels[inner].mean(axis=0)
            nearest = min(COLOURS, key=lambda c: np.abs(mean - np.array(COLOURS[c])).sum())
            assert nearest == obj.colour, (obj, mean)
        xs_seen.add(round(ax))
    assert len(xs_seen) > 10  # positions vary: no fixed slot gives the relation away


def test_negatives_are_false_of_the_image_and_labelled():
    rng = random.Random(3)
    kinds_seen = set()
    for seed in range(30):
        scene = random_scene(rng, 2 + seed % 2)
        image, layout = render_scene(scene, 64, seed)
        assert satisfies(layout, scene)
        style = Style("copula", inverse=bool(seed % 2))
        positive = describe(scene, style)
        for neg in negatives(scene, layout, style, rng):
            assert not satisfies(layout, parse(neg.text)), neg
            assert neg.text != positive
            kinds_seen.add((neg.kind, neg.subkind))
            render_caption(neg.text, 64, seed)  # always re-renderable
    assert kinds_seen == set(KINDS)


def test_swap_candidates_keep_the_words():
    scene = parse("a red circle left of a blue square")
    swapped = {describe(s) for s in candidates(scene, "swap", "att")}
    assert swapped == {"a blue circle to the left of a red square"}


def test_object_bank(tmp_path):
    paths = write_object_bank(tmp_path, size=48, seed=1, exclude=[("red", "star")])
    names = {p.name for p in paths}
    assert "red_circle.png" in names and "red_star.png" not in names
    assert len([p for p in paths if p.parent == tmp_path]) == len(COLOURS) * len(SHAPES) - 1
    backgrounds = [p for p in paths if p.parent.name == "backgrounds"]
    assert len(backgrounds) >= 4
    from PIL import Image
    im = Image.open(tmp_path / "blue_square.png")
    assert im.mode == "RGBA" and im.size == (48, 48)
    alpha = np.asarray(im)[..., 3]
    assert alpha[0, 0] == 0 and alpha[24, 24] == 255
    again = write_object_bank(tmp_path / "again", size=48, seed=1, exclude=[("red", "star")])
    for a, b in zip(paths, again):
        assert a.read_bytes() == b.read_bytes()


def test_cli_render(tmp_path, capsys):
    from compclip.datagen.world.cli import main
    out = tmp_path / "x.png"
    assert main(["render", "a red circle above a blue star", "--out", str(out), "--seed", "2"]) == 0
    from PIL import Image
    assert Image.open(out).tobytes() == render_caption("a red circle above a blue star", 64, 2).tobytes()
    assert main(["render", "a red circle near a blue star", "--out", str(tmp_path / "y.png")]) == 2
    assert "near a blue star" in capsys.readouterr().err


def test_spacy_rule_negatives_of_world_captions_parse_or_are_reported():
    """The text rules (`datagen.negatives`, swap / replace / add) on world captions: a negative
    either reads (and then is re-described and re-parsed to the same scene, and renders at the
    requested size into an image that shows exactly that scene) or the parser rejects it with a
    ParseError naming it; nothing is guessed. Parsed scenes beyond the world's 3 objects may be
    too crowded to place: that is reported too (PlacementError), never drawn wrongly. No negative
    that reads is the positive's own scene (a paraphrase would be a false negative). 68 % of the
    swap negatives read on these captions (seeds 0-3 measured 68-70 %); asserted >= 50 %."""
    from collections import Counter

    from compclip.datagen.negatives.rules import RuleNegativeGenerator
    from compclip.datagen.world.grammar import random_style
    rng = random.Random(0)
    captions = [describe(random_scene(rng, 2 + (i % 5 == 0)), random_style(rng)) for i in range(80)]
    size = 40
    total, parsed, crowded = Counter(), Counter(), 0
    for i, (caption, negs) in enumerate(zip(captions, RuleNegativeGenerator().generate(captions, seed=0))):
        positive = parse(caption)
        for neg in negs:
            total[neg.kind] += 1
            try:
                scene = parse(neg.text)
            except ParseError as err:
                assert err.caption == neg.text and err.unreadable and repr(neg.text) in str(err)
                with pytest.raises(ParseError):
                    render_caption(neg.text, size, i)
                continue
            parsed[neg.kind] += 1
            assert not scene.same_as(positive), (caption, neg.text)
            distinct = len({o.binding for o in scene.objects}) == len(scene.objects)
            styles = [Style(), Style("copula", inverse=True, variant=1),
                      Style("there", variant=2, synonyms=1, capital=True, period=True)]
            if distinct:  # "the" names an object unambiguously only when no two share colour and shape
                styles.append(Style("copula", inverse=True, definite=True))
            for style in styles:
                again = parse(describe(scene, style))
                assert again.same_as(scene), (neg.text, style, describe(scene, style))
            try:
                image, layout = render_scene(scene, size, i)
            except PlacementError:
                assert len(scene.objects) > 3, neg.text  # the world's own 1-3 object scenes always fit
                crowded += 1
                with pytest.raises(PlacementError):
                    render_caption(neg.text, size, i)
                continue
            assert satisfies(layout, scene, exhaustive=True), neg.text
            drawn = render_caption(neg.text, size, i)
            assert drawn.size == (size, size) and drawn.mode == "RGB"
            assert drawn.tobytes() == image.tobytes()
    assert set(total) == {"swap", "replace", "add"} and all(parsed.values())
    assert total["swap"] > 200 and parsed["swap"] / total["swap"] >= 0.5, (parsed, total)
    assert crowded <= 0.02 * sum(parsed.values())
