"""One import name: the toolkit is `compclip` alone (docs/architecture.md, "One import name").

- `pyproject.toml` lists every package folder as a subpackage of `compclip`, mapped to its folder,
  and `recipes/` and `launch/` as the data folders `compclip.recipes` and `compclip.launch`;
- no file of the repository imports a top-level `trainer`, `datagen`, `eval` or `models`;
- the API imports from a folder that has its own `models/` and `eval/` packages, which stay the
  caller's;
- from a checkout, the names resolve to the checkout's own folders.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("trainer", "datagen", "eval", "models")
DATA_FOLDERS = ("recipes", "launch")  # shipped in the wheel as package data (tests/test_install_layout.py)


def test_pyproject_maps_every_package_folder_into_compclip():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(ROOT).parts) for top in ("compclip",) + FOLDERS
               for p in (ROOT / top).rglob("__init__.py")}
    want = {f if f.split(".")[0] == "compclip" else f"compclip.{f}" for f in folders}
    assert set(tool["packages"]) == want | {f"compclip.{f}" for f in DATA_FOLDERS}
    assert tool["package-dir"] == {"compclip": "compclip", **{f"compclip.{f}": f for f in FOLDERS + DATA_FOLDERS}}


def test_nothing_imports_the_folders_as_top_level_packages():
    wrong = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in (".venv", ".venv-ci", "build", "runs", ".git", ".cache"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            wrong += [f"{rel}:{node.lineno} {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert not wrong, "import through compclip.<folder>: " + ", ".join(wrong)


def test_the_api_imports_beside_a_users_own_models_and_eval(tmp_path):
    for name in ("models", "eval"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"MINE = '{name}'\n")
    code = ("import models, eval\n"
            "from compclip.trainer.loop import Trainer\n"
            "from compclip.eval.api import run\n"
            "from compclip.models import load_model\n"
            "from compclip.datagen.negatives import RuleNegativeGenerator\n"
            "import compclip.trainer.loop as loop\n"
            "assert models.MINE == 'models' and eval.MINE == 'eval'\n"
            "print(loop.__file__)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # this checkout's compclip, the caller's folder first
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()) == ROOT / "trainer" / "loop.py"
