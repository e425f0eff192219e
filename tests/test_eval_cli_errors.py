"""`python -m eval`: what a user sees for each bad input or fault (docs/cli.md: one line, exit 2 for
input, 3 for a fault during the run), checkpoints in every form, comma lists, progress bars, help."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error

import pytest

from compclip.eval import download as dl
from compclip.eval.api import missing_data, run
from compclip.eval.cli import main
from tests.fixtures.eval_data import make_data_root
from compclip.models import CheckpointMeta, save_checkpoint


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_data_root(tmp_path_factory.mktemp("errors") / "data", n=4, seed=2)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, micro_model):
    """A run folder as the trainer writes it: checkpoints/step-NNNNNNN.{pt,json}, latest, best."""
    run_dir = tmp_path_factory.mktemp("runs") / "negclip"
    meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none", step=3)
    save_checkpoint(run_dir / "checkpoints", "step-0000003", micro_model.model, meta, pointers=("latest", "best"))
    return run_dir


def score(capsys, *args, root=None, out=None):
    argv = ["score", *args, "--quiet", "--no-plots"]
    if root is not None:
        argv += ["--data-root", str(root)]
    if out is not None:
        argv += ["--out", str(out)]
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("form", ["run", "checkpoints", "best", "latest", "file"])
def test_checkpoint_in_every_form_and_model_read_from_its_sidecar(capsys, root, run_dir, form):
    given = {"run": run_dir, "checkpoints": run_dir / "checkpoints", "best": run_dir / "checkpoints" / "best",
             "latest": run_dir / "checkpoints" / "latest",
             "file": run_dir / "checkpoints" / "step-0000003.pt"}[form]
    rc, out, err = score(capsys, "--pretrained", str(given), "--benchmarks", "sugarcrepe", root=root)
    assert rc == 0, err
    assert f"micro-vit-32:{run_dir / 'checkpoints' / 'step-0000003.pt'}\tsugarcrepe/macro\t" in out


def test_wrong_model_for_a_checkpoint_is_refused_in_one_line(capsys, root, run_dir):
    rc, out, err = score(capsys, "--model", "tiny-vit-64", "--pretrained", str(run_dir / "checkpoints" / "best"),
                         "--benchmarks", "sugarcrepe", root=root)
    ckpt = run_dir / "checkpoints" / "step-0000003.pt"
    assert rc == 2 and out == "" and "Traceback" not in err
    assert errors(err) == [f"error: {ckpt}: the checkpoint is a 'micro-vit-32' (its sidecar step-0000003.json says "
                           "so), not 'tiny-vit-64'; leave the architecture out (it is read from the checkpoint) "
                           "or give 'micro-vit-32'"]


def test_bad_model_arguments_are_one_line_before_anything_is_scored(capsys, root, run_dir, tmp_path):
    empty_run = tmp_path / "empty_run"
    (empty_run / "checkpoints").mkdir(parents=True)
    torn = tmp_path / "torn.pt"
    torn.write_bytes((run_dir / "checkpoints" / "step-0000003.pt").read_bytes()[:100_000])
    shutil.copy(run_dir / "checkpoints" / "step-0000003.json", tmp_path / "torn.json")
    cases = {
        (str(tmp_path / "nope"),): f"error: {tmp_path / 'nope'}: no such checkpoint; give a checkpoint file (.pt), "
                                   "a pointer file (best, latest), a run's checkpoints/ folder or the run folder",
        (str(empty_run),): f"error: {empty_run}: its checkpoints/ folder holds no checkpoint yet (the run has saved "
                           "none); give a run folder that holds one, or a checkpoint file",
        (str(torn),): f"error: {torn}: not a readable checkpoint (100000 bytes, no zip directory: truncated or not "
                      "PyTorch weights); copy it again, or give another checkpoint of the run",
        ("--model", "tiny-vit-46", "none"): "error: unknown architecture 'tiny-vit-46'; did you mean tiny-vit-64",
    }
    for args, message in cases.items():
        # the good model first: a bad second one must stop the command before the first is scored
        if args[0] == "--model":
            argv = ["--model", "micro-vit-32", "--pretrained", str(run_dir),
                    "--model", args[1], "--pretrained", args[2]]
        else:
            argv = ["--pretrained", str(run_dir), "--pretrained", args[0]]
        rc, out, err = score(capsys, *argv, "--benchmarks", "sugarcrepe", root=root)
        assert (rc, out) == (2, ""), (args, err)
        assert len(errors(err)) == 1 and errors(err)[0].startswith(message) and "Traceback" not in err, err


def test_wrong_model_without_a_sidecar_is_refused_not_resized(tmp_path, run_dir):
    """A bare file (no sidecar): weights that do not fit the architecture are refused rather than
    built with a resized position embedding (open_clip's default)."""
    from compclip.models import ArchitectureMismatch, load_model
    bare = tmp_path / "bare.pt"
    demo = load_model("demo-vit-64")  # context 32 (tiny-vit-64: 77)
    import torch
    torch.save({"state_dict": demo.model.state_dict()}, bare)
    with pytest.raises(ArchitectureMismatch, match=r"positional_embedding \[32, 128\] in the file, \[77, 128\] "
                                                   r"in 'tiny-vit-64'"):
        load_model("tiny-vit-64", str(bare))


def test_unknown_benchmark_is_named_with_the_known_ones(capsys, root):
    rc, out, err = score(capsys, "--model", "micro-vit-32", "--pretrained", "none", "--benchmarks", "sugarcrep,visla",
                         root=root)
    assert rc == 2 and errors(err) == ["error: unknown benchmark 'sugarcrep'; did you mean sugarcrepe? known: aro, "
                                       "bivlc, left_right, retrieval, sugarcrepe, sugarcrepe_pp, visla, "
                                       "visla_lexical, zeroshot"]


def test_comma_list_and_the_space_separated_alias(capsys, root):
    rc, out, err = score(capsys, "--model", "micro-vit-32", "--pretrained", "none", "--benchmarks",
                         "visla,sugarcrepe", root=root)
    assert rc == 0 and "visla/generic/i2t" in out and "sugarcrepe/macro" in out
    rc, out, err = score(capsys, "--model", "micro-vit-32", "--pretrained", "none", "--benchmarks",
                         "visla", "sugarcrepe", root=root)
    assert rc == 0 and "sugarcrepe/macro" in out
    assert ("note: '--benchmarks visla sugarcrepe' is deprecated and will be removed in 0.3; "
            "use '--benchmarks visla,sugarcrepe'") in err


def test_every_file_failure_is_found_by_the_data_check(root, tmp_path):
    """What used to pass the check and fail only when the benchmark was loaded (after the others
    were scored): a damaged BiVLC folder, a CIFAR meta file, a file that is not UTF-8."""
    data = tmp_path / "data"
    shutil.copytree(root, data)
    next((data / "bivlc").glob("*.arrow")).unlink()
    (data / "zeroshot" / "cifar-10-batches-py" / "batches.meta").unlink()
    (data / "sugarcrepe" / "add_att.json").write_bytes(b"\xff\xfe not text")
    lines = missing_data(["bivlc", "zeroshot", "sugarcrepe", "visla"], data)
    text = "\n".join(lines)
    assert len(lines) == 3, text
    assert f"bivlc: malformed: {data / 'bivlc'}: not a dataset saved with save_to_disk" in text
    assert "zeroshot: malformed: " in text and "batches.meta" in text
    assert f"sugarcrepe: malformed: {data / 'sugarcrepe' / 'add_att.json'}: not UTF-8 text" in text


def test_broken_benchmark_while_scoring_keeps_the_report_of_the_others(capsys, root, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(root, data)
    first = sorted((data / "sugarcrepe").glob("*.json"))[0]
    image = next(iter(json.loads(first.read_text()).values()))["filename"]
    (data / "coco" / "val2017" / image).write_bytes(b"not a jpeg")  # passes the check, fails when decoded
    out_dir = tmp_path / "reports"
    rc, out, err = score(capsys, "--model", "micro-vit-32", "--pretrained", "none", "--benchmarks",
                         "sugarcrepe,bivlc", root=data, out=out_dir)
    assert rc == 3 and "Traceback" not in err
    [line] = errors(err)
    assert line.startswith("error: sugarcrepe: scoring failed for micro-vit-32:random (ValueError: ")
    assert image in line and f"the report of what was scored is in {out_dir}" in line
    assert line.endswith("score again with --benchmarks sugarcrepe")
    summary = json.loads((out_dir / "summary.json").read_text())["micro-vit-32:random"]
    assert "bivlc/group" in summary and not any(k.startswith("sugarcrepe") for k in summary)


def test_download_failure_is_exit_3_naming_each_file(capsys, tmp_path, monkeypatch, shared_benchmarks):
    good = shared_benchmarks / "visla" / "Generic_VISLA.tsv"

    def fetch(url, dest, desc=None):
        if "Spatial" in url:
            raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
        shutil.copy(good, dest)
    monkeypatch.setattr(dl, "fetch", fetch)
    rc = main(["download", "--benchmarks", "visla", "--data-root", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 3 and "Traceback" not in err
    assert errors(err) == ["error: 1 download(s) failed: visla/Spatial_VISLA.tsv (<urlopen error [Errno -3] "
                           "Temporary failure in name resolution>); files already fetched are kept: check the "
                           "network (or the file's source) and run the same command again"]
    assert (tmp_path / "visla" / "Generic_VISLA.tsv").read_bytes() == good.read_bytes()
    # the old positional form still works for one release, with a note
    rc = main(["download", "visla", "--data-root", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 3 and "note: 'download visla' is deprecated and will be removed in 0.3; use " \
                       "'download --benchmarks visla'" in err


def test_progress_bars_name_their_benchmark_and_total(capsys, root, micro_model):
    from compclip.eval.scorer import OpenClipScorer
    scorer = OpenClipScorer(micro_model.model, micro_model.preprocess, micro_model.tokenizer, name="m")
    run(scorer, ["visla", "sugarcrepe"], str(root), progress=True, reuse=False)
    err = capsys.readouterr().err
    for desc in ("visla/generic: encode texts", "visla/spatial: encode images", "sugarcrepe/add_att: encode texts"):
        assert desc in err, desc
    assert "/12 [" in err or "/8 [" in err or "/4 [" in err  # bars carry their total


def test_help_shows_every_default_and_is_fast(repo_root):
    env = dict(os.environ, PYTHONPATH=str(repo_root))
    for argv in (["--help"], ["score", "--help"], ["download", "--help"]):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "compclip.eval", *argv], capture_output=True, text=True, env=env,
                              cwd=repo_root)
        took = time.perf_counter() - start
        assert done.returncode == 0 and took < 2.0, (argv, took)
        text = " ".join(done.stdout.split())
        if argv != ["--help"]:
            options = [o for o in ("--model", "--pretrained", "--benchmarks", "--batch-size", "--device",
                                   "--precision", "--quiet", "--data-root", "--images", "--force") if f"{o} " in text]
            assert options and text.count("(default:") >= len(options), text
    score_help = " ".join(subprocess.run([sys.executable, "-m", "compclip.eval", "score", "--help"], capture_output=True,
                                         text=True, env=env, cwd=repo_root).stdout.split())
    assert "(default: 256)" in score_help and "a run's checkpoints/ folder or the run folder" in score_help
