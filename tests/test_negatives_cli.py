"""The negatives command line (docs/cli.md): --src/--out, comma lists, --max-count, the old
spellings with notes, one-line errors, a progress bar with a total, a light start-up (no torch,
numpy's BLAS in the tagger)."""
import json
import os
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

import pytest

from compclip.datagen.negatives.__main__ import main as cli
from compclip.shardset.shards import read_manifest
from tests.fixtures.faults import Killed, killed_after

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = [f"A {adj} {who} is {verb} on a {adj2} {place} with a {what}."
            for adj, who, verb, place, adj2, what in product(
                ["red", "small", "old", "wooden"], ["dog", "man", "woman", "horse"],
                ["sitting", "standing"], ["bench", "beach"], ["green", "large"], ["cat", "table"])][::5][:40]


def write_csv(path: Path, captions=CAPTIONS) -> Path:
    lines = ["filepath,caption"] + [f"img{i}.jpg,{c}" for i, c in enumerate(captions)]
    path.write_text("\n".join(lines) + "\n")
    return path


def shards(out: Path) -> list[bytes]:
    return [(out / s["name"]).read_bytes() for s in read_manifest(out)["shards"]]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def test_new_spellings_and_old_ones_with_notes_write_the_same(tmp_path, capsys):
    src = write_csv(tmp_path / "caps.csv")
    assert cli(["generate", "--src", str(src), "--out", str(tmp_path / "new"), "--kinds", "swap,add:obj",
                "--max-count", "15", "--no-plausibility", "--quiet"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert read_manifest(tmp_path / "new")["features"]["kinds"] == ["add:obj", "swap"]
    # the selected kinds, fired or not: this made-up corpus never has two of its dog, man,
    # woman, horse in one caption, so the scene check refuses each as an added object, and
    # add:obj stays at 0
    assert {k.split(":")[0] for k in stats["coverage"]} == {"swap", "add"}
    assert "add:obj" in stats["coverage"] and "add:att" not in stats["coverage"]
    assert stats["negatives"]
    assert [s["samples"] for s in read_manifest(tmp_path / "new")["shards"]] == [15, 15, 10]

    assert cli(["generate", str(src), str(tmp_path / "old"), "--kinds", "swap", "add:obj",
                "--shard-size", "15", "--no-plausibility", "--quiet"]) == 0
    err = capsys.readouterr().err
    for old, new in ((f"generate {src} {tmp_path / 'old'}", f"generate --src {src} --out {tmp_path / 'old'}"),
                     ("--kinds swap add:obj", "--kinds swap,add:obj"), ("--shard-size", "--max-count")):
        assert f"note: '{old}' is deprecated and will be removed in 0.3; use '{new}'" in err
    assert shards(tmp_path / "old") == shards(tmp_path / "new")


@pytest.mark.parametrize("case", ["missing", "column", "read_only", "kind", "no_out", "three_paths",
                                  "bad_vocab"])
def test_errors_are_one_line_exit_2_and_nothing_written(tmp_path, capsys, case):
    src = write_csv(tmp_path / "caps.csv")
    out = tmp_path / "out"
    args, words = {
        "missing": (["--src", str(tmp_path / "nope.csv"), "--out", str(out)], "nope.csv: no such file"),
        "column": (["--src", str(src), "--out", str(out), "--caption-col", "text"], "no caption column"),
        "read_only": (["--src", str(src), "--out", "/sys/compclip_negatives_out"], "permission denied"),
        "kind": (["--src", str(src), "--out", str(out), "--kinds", "swap,swop"], "unknown negative kind 'swop'"),
        "no_out": (["--src", str(src)], "--out missing"),
        "three_paths": ([str(src), str(out), "extra"], "give the input as --src"),
        "bad_vocab": (["--src", str(src), "--out", str(out), "--vocab", str(src)], "caps.csv: not a vocabulary file"),
    }[case]
    if case == "read_only" and not Path("/sys").is_dir():
        pytest.skip("no /sys to stand for a folder nobody may write")
    assert cli(["generate", *args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and words in err, err
    assert not out.exists()


def test_progress_bar_has_a_total(tmp_path, capsys):
    src = write_csv(tmp_path / "caps.csv")
    assert cli(["generate", "--src", str(src), "--out", str(tmp_path / "out"), "--kinds", "swap"]) == 0
    err = capsys.readouterr().err
    assert "negatives" in err and f"/{len(CAPTIONS)} [" in err, err[-300:]
    assert cli(["generate", "--src", str(src), "--out", str(tmp_path / "lim"), "--kinds", "swap",
                "--limit", "7"]) == 0
    assert "/7 [" in capsys.readouterr().err


def test_module_spelling_notes_its_deprecation_and_main_does_not(tmp_path, capsys):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "compclip.datagen.negatives", "--help"], capture_output=True,
                          text=True, env=env(), cwd=ROOT)
    assert time.perf_counter() - started < 2.0
    assert done.returncode == 0 and "generate" in done.stdout
    assert ("note: 'python -m datagen.negatives' is deprecated and will be removed in 0.3; "
            "use 'python -m datagen negatives'") in done.stderr
    with pytest.raises(SystemExit):
        cli(["--help"])
    captured = capsys.readouterr()
    assert "deprecated" not in captured.err and "python -m datagen negatives" in captured.out
    done = subprocess.run([sys.executable, "-m", "compclip.datagen.negatives", "generate", "--help"],
                          capture_output=True, text=True, env=env(), cwd=ROOT)
    options = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  --")]
    assert "--src" in options and "--max-count" in options and "--shard-size" not in options
    text = done.stdout.replace("\n", " ")
    assert text.count("(default:") >= len(options) - 1  # every option but --help shows its default


def test_generate_never_imports_torch(tmp_path):
    src = write_csv(tmp_path / "caps.csv")
    code = ("import sys; from datagen.negatives.__main__ import main; "
            f"rc = main(['generate', '--src', {str(src)!r}, '--out', {str(tmp_path / 'out')!r}, '--quiet']); "
            "print('torch' in sys.modules, rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT)
    assert done.stdout.strip().splitlines()[-1] == "False 0", done.stderr[-500:]


def test_bare_tokenizer_loads_the_packages_rules_and_splits_as_spacy_load_does():
    from compclip.datagen.negatives.rules import SPACY_MODEL, import_spacy, load_nlp
    ours = load_nlp().tokenizer
    plain = import_spacy().load(SPACY_MODEL, exclude=["ner", "lemmatizer", "senter", "parser",
                                                      "tok2vec", "tagger", "attribute_ruler"]).tokenizer
    assert len(ours.rules) > 1000 and ours.rules == plain.rules

    def pattern(tokenizer, attr):
        found = getattr(tokenizer, attr)  # a compiled pattern's bound method, or None
        return None if found is None else found.__self__.pattern
    for attr in ("prefix_search", "suffix_search", "infix_finditer", "token_match", "url_match"):
        assert pattern(ours, attr) == pattern(plain, attr), attr
    assert pattern(ours, "prefix_search") and pattern(ours, "infix_finditer")
    texts = CAPTIONS + ["Mr. Smith's dog-sled isn't at http://x.co :) e.g. 3.5km in the U.S.A. at 10am",
                        "A man's cat;; -- ''quoted'' (hi) [x] $5 50% can't won't gonna"]
    assert [[(t.text, t.whitespace_) for t in ours(x)] for x in texts] == \
        [[(t.text, t.whitespace_) for t in plain(x)] for x in texts]


def test_tagger_multiplies_with_numpy_blas_and_tags_as_blis_does():
    from thinc.api import NumpyOps
    from compclip.datagen.negatives.rules import SPACY_MODEL, import_spacy, load_nlp
    nlp = load_nlp()
    ops = nlp.get_pipe("tok2vec").model.ops
    assert isinstance(ops, NumpyOps) and ops.use_blis is False
    blis = import_spacy().load(SPACY_MODEL, disable=["ner", "lemmatizer", "attribute_ruler", "parser"])
    assert blis.get_pipe("tok2vec").model.ops.use_blis is True
    texts = sorted(set(CAPTIONS))
    assert [[t.tag_ for t in d] for d in nlp.pipe(texts)] == [[t.tag_ for t in d] for d in blis.pipe(texts)]


def test_a_resume_with_an_edited_input_is_refused_and_changes_nothing(tmp_path, capsys):
    """S7: captions edited between a kill and the rerun (before: exit 0, old and new captions in
    one set) are refused in one line naming the input; the killed run's output is untouched. A
    file touched with the same bytes resumes."""
    from compclip.datagen.negatives.pipeline import GenerateOptions, run_generate
    src, out = write_csv(tmp_path / "caps.csv"), tmp_path / "out"
    with pytest.raises(Killed), killed_after(25):  # a run killed after 2 shards
        run_generate(src, out, GenerateOptions(shard_size=10, progress=False))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(read_manifest(out)["shards"]) == 2
    write_csv(src, [c.replace("red", "tan") for c in CAPTIONS])  # same size, other words
    args = ["generate", "--src", str(src), "--out", str(out), "--max-count", "10", "--quiet"]
    assert cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {src}: this input changed since {out} was started (its contents differ "
                          "(sha256 ") and err.endswith("); rerun with the input as it was, or write to a "
                                                       "new --out") and "\n" not in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    write_csv(src)  # the captions as they were, written anew: another mtime, the same bytes
    assert cli(args) == 0
    capsys.readouterr()
    run_generate(src, tmp_path / "whole", GenerateOptions(shard_size=10, progress=False))
    assert shards(out) == shards(tmp_path / "whole")
