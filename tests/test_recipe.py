"""Recipe schema: valid files load, and every kind of mistake fails with one line naming it."""
import pytest

from compclip.trainer.recipe import Recipe, RecipeError, load_recipe

GOOD = """
name: t
model: {arch: micro-vit-32}
data: {train_shards: ["x/shard-{000000..000001}.tar"], samples_per_epoch: 64, batch_size: 8}
optim: {lr: 1e-6}
schedule: {epochs: 1}
"""
TWO = "data.train_shards=[coco, leftright]"


def write(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def test_valid_recipe_loads_with_defaults(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD))
    assert isinstance(recipe, Recipe)
    assert recipe.optim.lr == pytest.approx(1e-6)  # YAML 1.1 would read "1e-6" as a string
    assert recipe.negatives.per_image == 0 and recipe.precision == "fp32"


def test_overrides_set_nested_keys_with_yaml_types(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD), ["optim.lr=3e-4", "negatives.per_image=2",
                                                 "eval.benchmarks=[visla, sugarcrepe]"])
    assert recipe.optim.lr == pytest.approx(3e-4)
    assert recipe.negatives.per_image == 2
    assert recipe.eval.benchmarks == ["visla", "sugarcrepe"]


@pytest.mark.parametrize("text, overrides, expected", [
    (GOOD.replace("lr: 1e-6", "lrr: 1e-6"), [], "unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
    (GOOD, ["optim.weight_decy=0.1"], "unknown key 'optim.weight_decy' (did you mean 'optim.weight_decay'?)"),
    (GOOD + "schedul: {}\n", [], "did you mean 'schedule'?"),
    (GOOD.replace("batch_size: 8", "batch_size: eight"), [], "key 'data.batch_size'"),
    (GOOD, ["data.batch_size=\"8\""], "key 'data.batch_size'"),
    (GOOD.replace("schedule: {epochs: 1}", ""), [], "missing required key 'schedule'"),
    (GOOD.replace("{arch: micro-vit-32}", "{pretrained: openai}"), [],
     "key 'model': Value error, arch is required unless pretrained is a compclip checkpoint"),
    (GOOD.replace("{arch: micro-vit-32}", "{}"), [], "arch is required unless pretrained"),
    (GOOD, ["precision=fp8"], "key 'precision'"),
    (GOOD, ["optim.lr"], "not of the form key.sub=value"),
    ("name: [unclosed", [], "not valid YAML"),
    (GOOD, [TWO, "data.source_batch=[4, 3]"], "key 'data': Value error, source_batch sums to 7, batch_size is 8"),
    (GOOD, ["data.source_batch=[4, 4]"], "source_batch needs one anchor count per train_shards entry"),
    (GOOD, [TWO, "data.source_batch=[8, 0]"], "key 'data.source_batch.1': Input should be greater than or equal"),
    (GOOD, [TWO, "data.source_batch=[4, 4]", "data.source_weights=[1.0, 1.0]"],
     "source_batch and source_weights exclude each other"),
    (GOOD, ["negatives.per_partner=1"], "r.yaml: negatives.per_partner=1 draws from each neighbour's own neg.json "
                                        "and needs data.partner=neighbour (got none); set negatives.per_partner=0"),
    (GOOD, ["negatives.per_partner=1", "data.partner=generated"], "needs data.partner=neighbour (got generated)"),
    (GOOD, ["negatives.draw=random"], "key 'negatives.draw'"),
    (GOOD, ["negatives.rules=sugarcrepe"], "key 'negatives.rules'"),
])
def test_bad_recipes_fail_with_one_line_naming_file_and_key(tmp_path, text, overrides, expected):
    path = write(tmp_path, text)
    with pytest.raises(RecipeError) as err:
        load_recipe(path, overrides)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert expected in message


def test_partner_negatives_draw_and_rules_load(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD), ["data.partner=neighbour", "negatives.per_partner=1",
                                                 "negatives.draw=by_subkind", "negatives.rules=negclip"])
    n = recipe.negatives
    assert (n.per_partner, n.draw, n.rules) == (1, "by_subkind", "negclip")
    defaults = load_recipe(write(tmp_path, GOOD)).negatives
    assert (defaults.per_partner, defaults.draw, defaults.rules) == (0, "uniform", None)


def test_source_batch_gives_the_exact_mix(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD), [TWO, "data.source_batch=[6, 2]", "data.partner=mirrored"])
    assert recipe.data.source_batch == [6, 2] and recipe.data.source_weights is None


def test_missing_file_is_named(tmp_path):
    with pytest.raises(RecipeError, match="nope.yaml: recipe file not found"):
        load_recipe(tmp_path / "nope.yaml")


def test_every_shipped_recipe_validates(repo_root):
    recipes = sorted((repo_root / "recipes").glob("*.yaml"))
    assert recipes, "recipes/ holds no recipe"
    for path in recipes:
        load_recipe(path)
