"""Where the recipes and launch files are: `compclip-recipes path [NAME]` (also
`python -m compclip.resources path [NAME]`) prints the folder, or the file of one recipe.

From a checkout they are the repository's `recipes/` and `launch/`; installed from the wheel they
are the data folders `compclip/recipes/` and `compclip/launch/` beside the code (pyproject.toml's
package data). Either way `compclip.recipes` and `compclip.launch` resolve to them.

    compclip-recipes path                 # the recipes folder
    compclip-recipes path negclip         # .../negclip.yaml
    compclip-recipes path --launch        # the launch folder (accelerate configs, SLURM scripts)
    compclip-recipes list                 # the recipe names
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path


def folder(kind: str = "recipes") -> Path:
    """The folder of `kind` ("recipes" or "launch") this `compclip` reads."""
    if kind not in ("recipes", "launch"):
        raise ValueError(f"no data folder named {kind!r} (recipes or launch)")
    spec = importlib.util.find_spec(f"compclip.{kind}")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"compclip.{kind}: not in this installation")
    return Path(list(spec.submodule_search_locations)[0])


def recipe(name: str) -> Path:
    """The file of recipe `name` (`negclip` or `negclip.yaml`)."""
    path = folder("recipes") / (name if name.endswith(".yaml") else f"{name}.yaml")
    if not path.is_file():
        known = ", ".join(names())
        raise FileNotFoundError(f"no recipe {name!r} in {path.parent} (known: {known})")
    return path


def names() -> list[str]:
    return sorted(p.stem for p in folder("recipes").glob("*.yaml"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compclip-recipes", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    where = sub.add_parser("path", help="print the recipes folder, one recipe's file, or (--launch) the launch folder")
    where.add_argument("name", nargs="?", help="a recipe name, e.g. negclip")
    where.add_argument("--launch", action="store_true", help="the launch folder instead")
    sub.add_parser("list", help="print the recipe names")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            print("\n".join(names()))
        elif args.launch:
            print(folder("launch"))
        else:
            print(recipe(args.name) if args.name else folder("recipes"))
    except (FileNotFoundError, ValueError) as err:
        print(f"compclip-recipes: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
