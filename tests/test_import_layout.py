"""The layout's import rules, read from the source with `ast` (nothing is imported):

- no import circle between modules, except the benchmark registry's (`eval.registry` and the
  benchmark modules that register themselves with it) and the ones listed in `ALLOWED_CIRCLES`;
- `compclip/` (the shared bottom layer: shard format, file and lock helpers, command-line
  convention, third-party patches) imports none of the other packages;
- `trainer/` and `eval/` import nothing from `datagen/`; `datagen/` nothing from `trainer/` or `eval/`.

Every import counts, those inside functions included. `from pkg import name` depends on `pkg`
itself (its `__init__`) as well as on `pkg.name` when that is a module.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("compclip", "datagen", "eval", "models", "trainer")
REGISTRY = "compclip.eval.registry"
ALLOWED_CIRCLES: list[set[str]] = []  # a circle left on purpose goes here, with the reason
FORBIDDEN = {"compclip": ("datagen", "eval", "models", "trainer"),
             "models": ("datagen", "eval", "trainer"),
             "trainer": ("datagen",), "eval": ("datagen", "trainer"), "datagen": ("trainer", "eval")}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if package != "compclip":  # the folders are subpackages of compclip when imported
                name = "compclip." + name
            found[name.removesuffix(".__init__")] = path
    return found


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of ours it imports."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1
                    stack.append(child); on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop(); on.discard(member); component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def is_registry(component: set[str], edges: dict[str, set[str]]) -> bool:
    """The registry and modules that import it to register themselves: every circle through
    the registry, and nothing else in the component."""
    if REGISTRY not in component:
        return False
    rest = component - {REGISTRY}
    without = {m: {t for t in edges[m] if t != REGISTRY} for m in rest}
    return not circles({m: {t for t in ts if t in rest} for m, ts in without.items()})


def test_no_import_circles_but_the_registry():
    edges = imports(modules())
    found = [c for c in circles(edges) if not is_registry(c, edges) and c not in ALLOWED_CIRCLES]
    assert not found, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def layer(module: str) -> str:
    """The folder a module lives in: compclip.trainer.loop -> trainer, compclip.cli -> compclip."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES[1:] else parts[0]


def test_the_packages_import_only_downwards():
    wrong = sorted(f"{m} -> {t}" for m, ts in imports(modules()).items() for t in ts
                   if layer(t) in FORBIDDEN.get(layer(m), ()))
    assert not wrong, "imports across the layers: " + ", ".join(wrong)


def test_the_check_sees_a_circle_and_a_wrong_import(tmp_path):
    """The checks themselves: a made-up circle and a made-up upward import are found."""
    edges = {"a.x": {"a.y"}, "a.y": {"a.x"}, "a.z": set(), REGISTRY: {"eval.b"}, "eval.b": {REGISTRY}}
    found = circles(edges)
    assert {"a.x", "a.y"} in found and not is_registry({"a.x", "a.y"}, edges)
    assert is_registry({REGISTRY, "eval.b"}, edges)
