"""The docs are a manual that stays true to the repository (issue 33, Required 6).

- docs/recipes.md documents every key of the recipe schema (`trainer.recipe.Recipe`, walked
  through the pydantic models' `model_fields`).
- docs/negatives.md stays a manual: at most 400 lines.
- No diary numbering of work periods in any tracked file's name or text: history is in
  CHANGELOG.md by date, judged samples and measurements are named by content and commit.
- No doc names a path of the machine it was written on (`../shared`, `/work/`), and words that
  describe a machine ("this machine", "2 cores", a CPU model) appear only in a measurement's own
  record (bench/results/, bench/RESULTS.md), not in the manual's prose.
- Every repository path a doc writes in backticks exists.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
DIARY = re.compile(r"sessions?[ _-]?\d+", re.IGNORECASE)
MACHINE = re.compile(r"this machine|\b(?:2|two)(?:[ -](?:shared|idle|busy|CPU))*[ -]cores?\b|idle cores"
                     r"|idle machine|shared machine|dev machine"
                     r"|\bEPYC\b|\bXeon\b|\bRyzen\b|AVX-?512|\bCore i[3579]\b", re.IGNORECASE)
RECORDS = ("bench/results/", "bench/RESULTS.md")  # where a measurement's machine is written down
PATH_EXT = (".py", ".md", ".yaml", ".yml", ".json", ".tsv", ".sh")


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.stdout.decode().split("\0") if p]


def _docs() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "CHANGELOG.md"]


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (commands and quoted messages)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _recipe_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys.extend(_recipe_keys(ann, prefix + name + "."))
        else:
            keys.append(prefix + name)
    return keys


def _documented_keys(text: str) -> set[str]:
    """`## Top level` / `## \\`section\\`` headings, then the first cell of each table row."""
    keys, section = set(), None
    for line in text.splitlines():
        head = re.match(r"^## (?:`(\w+)`|(Top level))\s*$", line)
        if head:
            section = head.group(1) or ""
            continue
        if line.startswith("## "):
            section = None
        row = re.match(r"^\|\s*`(\w+)`\s*\|", line)
        if section is not None and row:
            keys.add(f"{section}.{row.group(1)}" if section else row.group(1))
    return keys


def test_recipes_md_documents_every_recipe_key():
    from compclip.trainer.recipe import Recipe
    documented = _documented_keys((ROOT / "docs" / "recipes.md").read_text(encoding="utf-8"))
    keys = _recipe_keys(Recipe)
    assert len(keys) > 60 and "model.compile" in keys and "data.jpeg_draft" in keys
    missing = [k for k in keys if k not in documented]
    assert not missing, f"docs/recipes.md does not document: {missing}"
    unknown = sorted(documented - set(keys))
    assert not unknown, f"docs/recipes.md documents keys the schema does not have: {unknown}"


def test_negatives_md_is_a_manual_of_at_most_400_lines():
    lines = (ROOT / "docs" / "negatives.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 400, f"docs/negatives.md has {lines} lines"


def test_no_diary_numbering_in_names_or_text():
    bad = []
    for rel in _tracked():
        if DIARY.search(rel):
            bad.append(f"{rel}: file name")
        path = ROOT / rel
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary (images)
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if DIARY.search(line):
                bad.append(f"{rel}:{n}: {line.strip()[:80]}")
    assert not bad, "diary numbering (say what changed, by commit or date):\n" + "\n".join(bad)


def test_docs_name_no_paths_of_the_writers_machine():
    bad = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
           for p in _docs() for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if "../shared" in line or "/work/" in line]
    assert not bad, "\n".join(bad)


def test_machine_descriptions_only_in_measurement_records():
    bad = []
    for rel in _tracked():
        if not rel.endswith(".md") or rel.startswith(RECORDS[0]) or rel == RECORDS[1]:
            continue
        text = _prose((ROOT / rel).read_text(encoding="utf-8"))
        for n, line in enumerate(text.splitlines(), 1):
            if MACHINE.search(line):
                bad.append(f"{rel}: {line.strip()[:90]}")
    assert not bad, "machine statements belong in bench/results/ or bench/RESULTS.md:\n" + "\n".join(bad)


def _backticked_paths(text: str, top: set[str], folders: bool) -> set[str]:
    """Spans that name a file of the repository (first part a top-level folder of it, ending in a
    known extension) and, with `folders`, spans naming a top-level folder (`models/`)."""
    found = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        span = span.strip()
        if " " in span or any(c in span for c in "*{}<>[]|=,$"):
            continue  # a command, a pattern or a placeholder
        span = span.split("#")[0].split(":")[0]
        first = span.split("/")[0]
        if "/" in span.rstrip("/") and first in top and span.endswith(PATH_EXT):
            found.add(span)
        elif folders and re.fullmatch(r"[A-Za-z_][\w.-]*/", span):
            found.add(span)
    return found


def test_backticked_repository_paths_in_docs_exist():
    top = {p.split("/")[0] for p in _tracked() if "/" in p}
    missing = []
    for doc in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        for path in sorted(_backticked_paths(text, top, folders=doc.name == "README.md")):
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: `{path}`")
    assert not missing, "paths that are not in the repository:\n" + "\n".join(missing)
