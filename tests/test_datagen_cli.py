"""`python -m datagen` follows docs/cli.md: help with defaults on every option and no heavy import
before parsing, `negatives` / `world` sub-commands, one-line errors with exit 2 (input) or 3
(fault), and every writer refusing, in one line, a rerun with an option that changes its output."""
import contextlib
import errno
import io
import json
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from compclip.datagen.__main__ import build_parser, main
from compclip.shardset.shards import read_manifest, update_manifest
from compclip.shardset.tarblocks import TarWriter
from compclip.datagen.images.stitch import write_stitched

HEAVY = ("numpy", "PIL", "torch", "open_clip", "spacy")


def make_bank(folder: Path) -> Path:
    """Three flat-coloured objects with different names."""
    from PIL import Image
    folder.mkdir(parents=True, exist_ok=True)
    for name, colour in (("red_box", (255, 0, 0)), ("green_box", (0, 255, 0)), ("blue_box", (0, 0, 255))):
        Image.new("RGBA", (12, 10), colour + (255,)).save(folder / f"{name}.png")
    return folder


def _actions(parser, path=()):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield from _actions(sub, path + (name,))
        else:
            yield path, action


def test_every_option_has_help_and_the_description_is_whole():
    parser = build_parser()
    missing = [f"{' '.join(path)} {action.option_strings or action.dest}"
               for path, action in _actions(parser)
               if action.help is None and action.dest not in ("help", "legacy")]
    assert missing == []
    assert parser.description.rstrip().endswith(".")
    from compclip.datagen.world.cli import build_parser as world_parser
    missing = [f"{' '.join(path)} {action.dest}" for path, action in _actions(world_parser())
               if action.help is None]
    assert missing == []


@pytest.mark.parametrize("argv", [["-m", "compclip.datagen", "--help"], ["-m", "compclip.datagen", "world", "--help"],
                                  ["-m", "compclip.datagen", "world", "build", "--help"],
                                  ["-m", "compclip.datagen.world", "--help"], ["-m", "compclip.datagen", "stitch", "--help"]])
def test_help_imports_nothing_heavy(argv, repo_root):
    code = ("import runpy, sys\n"
            f"sys.argv = {argv[1:2] + argv[2:]!r}\n"
            "try:\n"
            f"    runpy.run_module({argv[1]!r}, run_name='__main__', alter_sys=True)\n"
            "except SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n"
            f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert "HEAVY []" in run.stdout, run.stdout[-300:]
    assert "usage: python -m datagen" in run.stdout


def test_world_and_negatives_are_subcommands(tmp_path, capsys):
    assert main(["world", "render", "a red circle above a blue star", "--out", str(tmp_path / "x.png")]) == 0
    assert (tmp_path / "x.png").is_file()
    assert main(["world", "render", "a red circle near a blue star", "--out", str(tmp_path / "y.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_:
        main(["negatives", "--help"])
    assert exit_.value.code == 0 and "generate" in capsys.readouterr().out


def test_old_world_entry_point_still_works_with_a_note(tmp_path, repo_root):
    run = subprocess.run([sys.executable, "-m", "compclip.datagen.world", "render", "a red circle",
                          "--out", str(tmp_path / "x.png")], cwd=repo_root, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "note: 'python -m datagen.world' is deprecated and will be removed in 0.3; use " \
           "'python -m datagen world'" in run.stderr


# ------------------------------------------------------------------ a small source shard set

@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    bank = make_bank(root / "bank")
    write_stitched(root / "set", bank, 6, size=(32, 32), max_count=4)
    return root / "set"


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_inputs_that_are_not_shard_sets_are_one_line_errors(src, tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "manifest.json").write_text(json.dumps({"shards": [], "complete": False}))
    cases = [(tmp_path / "missing", "missing: no such folder; give a shard set folder (--src)"),
             (tmp_path / "plain", "plain: not a shard set (no manifest.json)"),
             (tmp_path / "partial", "partial: shard set is not complete; finish (rerun) the command")]
    for cmd in (["knn"], ["genimages"], ["shuffle"]):
        for path, says in cases:
            assert main(cmd + ["--src", str(path), "--out", str(tmp_path / "o")]) == 2
            assert says in _one_error(capsys)
    assert not (tmp_path / "o").exists()  # found before anything was written


def test_knn_takes_the_architecture_from_a_run_folder(src, tmp_path, micro_model, monkeypatch):
    """`--pretrained RUN` with no `--arch`: the checkpoint that run's `latest` points to, built as
    the architecture its sidecar names (before: `--arch` defaulted to ViT-B-32 and was refused)."""
    from compclip.datagen.images import cli
    from compclip.models import CheckpointMeta, save_checkpoint
    ckpts = tmp_path / "run" / "checkpoints"
    path = save_checkpoint(ckpts, "step-0000002", micro_model.model,
                           CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none"))
    seen = {}
    monkeypatch.setattr(cli, "load_scorer", lambda args: seen.update(arch=args.arch, pretrained=args.pretrained)
                        or (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        main(["knn", "--src", str(src), "--out", str(tmp_path / "o"), "--pretrained", str(tmp_path / "run")])
    assert seen == {"arch": "micro-vit-32", "pretrained": str(path)}


def test_unknown_model_is_refused_before_any_work(src, tmp_path, capsys):
    assert main(["knn", "--src", str(src), "--out", str(tmp_path / "o"), "--arch", "no-such-arch"]) == 2
    assert "unknown architecture 'no-such-arch'" in _one_error(capsys)
    assert main(["knn", "--src", str(src), "--out", str(tmp_path / "o2"), "--arch", "micro-vit-32",
                 "--pretrained", "no-such-tag"]) == 2
    assert "pretrained 'no-such-tag' is neither a file nor an open_clip tag of 'micro-vit-32'" in _one_error(capsys)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()  # nothing written
    assert main(["genimages", "--src", str(src), "--out", str(tmp_path / "g"), "--backend", "diffusers",
                 "--model", str(tmp_path / "no-such-model")]) == 2
    assert "no-such-model: cannot load a diffusers pipeline" in _one_error(capsys)


def test_read_only_out_is_an_input_error(src, tmp_path, capsys, monkeypatch):
    import os
    if os.geteuid() == 0:  # root writes anywhere chmod forbids; /sys refuses even root
        out = Path("/sys/compclip_test_read_only/out")
    else:
        (tmp_path / "ro").mkdir(mode=0o555)
        out = tmp_path / "ro" / "out"
    assert main(["shuffle", "--src", str(src), "--out", str(out)]) == 2
    assert "permission denied" in _one_error(capsys)
    assert main(["world", "build", "--out", str(out)]) == 2
    assert "permission denied" in _one_error(capsys)


def test_disk_full_mid_run_is_a_fault_and_the_set_resumes(tmp_path, capsys, monkeypatch):
    bank = make_bank(tmp_path / "bank")
    args = ["stitch", "--bank", str(bank), "--out", str(tmp_path / "o"), "--n", "6", "--canvas", "32",
            "--max-count", "2"]
    real, calls = TarWriter.add, []  # every shard member is written by TarWriter.add

    def full_after_a_while(self, name, value):
        calls.append(name)
        if len(calls) > 20:
            raise OSError(errno.ENOSPC, "No space left on device", self.file.name)
        return real(self, name, value)
    monkeypatch.setattr(TarWriter, "add", full_after_a_while)
    assert main(args) == 3
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]  # after the progress bar
    assert line.startswith("error: ") and "Traceback" not in err, err
    assert "no space left on device writing" in line and "free space or choose another output folder" in line
    done = len(read_manifest(tmp_path / "o")["shards"])
    assert done >= 1 and not (tmp_path / "o" / "run.lock").exists()  # released after a fault too
    monkeypatch.setattr(TarWriter, "add", real)
    assert main(args) == 0  # resumes after the complete shards
    assert json.loads(capsys.readouterr().out)["verified"]["samples"] == 6


# ------------------------------------------------------------------ option changes refused

def _coco_inputs(tmp_path):
    (tmp_path / "images").mkdir(exist_ok=True)
    (tmp_path / "captions.json").write_text(json.dumps({"images": [], "annotations": []}))
    return ["--captions", str(tmp_path / "captions.json"), "--images", str(tmp_path / "images")]


SHARD = {"name": "shard-000000.tar", "samples": 1, "inputs": 1, "bytes": 0, "sha256": "", "skipped": {}}
WRITERS = {  # command line (without --out), option, value recorded, value of this run
    "stitch": (lambda src, tmp: ["stitch", "--bank", str(src), "--n", "4", "--world-bank", "0"],
               "--n", 5, "4"),
    "knn": (lambda src, tmp: ["knn", "--src", str(src), "--arch", "micro-vit-32"], "--k", 2, "3"),
    "genimages": (lambda src, tmp: ["genimages", "--src", str(src)], "--per-sample", 2, "1"),
    "prepare coco": (lambda src, tmp: ["prepare", "coco", *_coco_inputs(tmp)], "--mode", "all", "sample"),
    "prepare coco --knn": (lambda src, tmp: ["prepare", "coco", *_coco_inputs(tmp), "--knn", "3",
                                             "--arch", "micro-vit-32"], "--knn", 2, "3"),
    "prepare trohn": (lambda src, tmp: ["prepare", "trohn", "--dataset", "x", "--images-root",
                                        str(tmp)], "--label", "infer", "auto"),
    "shuffle": (lambda src, tmp: ["shuffle", "--src", str(src)], "--seed", 1, "0"),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_writer_refuses_a_changed_option(name, src, tmp_path, capsys):
    argv, option, old, new = WRITERS[name]
    argv = argv(src, tmp_path)
    if name == "stitch":
        argv[2] = str(tmp_path / "bank")
        make_bank(tmp_path / "bank")
    out = tmp_path / "out"
    recorded(out, {option: old})  # what a run with `option old`, killed after a shard, left
    assert main(argv + ["--out", str(out), option, new]) == 2
    shown = "on" if old is True else old
    assert _one_error(capsys) == (
        f"error: {out / 'manifest.json'}: this output was started with {option} {shown}, this run has "
        f"{option} {new}; rerun with the options it was started with ({option} {shown}) or write to "
        "a new --out")
    assert read_manifest(out)["shards"] == [SHARD] and not list(out.glob("*.tar*"))
    assert not (out / "run.lock").exists()  # the lock is released when a run is refused


def recorded(out: Path, options: dict, file: str = "manifest.json") -> None:
    out.mkdir(parents=True)
    record = {"options": options} if file != "manifest.json" else {
        "schema_version": 1, "features": None, "shards": [SHARD], "complete": False, "options": options}
    (out / file).write_text(json.dumps(record))


def test_a_set_with_no_complete_shard_takes_new_options(tmp_path):
    from compclip.shardset.shards import pin_options
    pin_options(tmp_path, {"--k": 2, "--dtype": "float16"})
    assert pin_options(tmp_path, {"--k": 3}) == {"--k": 3}  # a run stopped before its first shard
    assert read_manifest(tmp_path)["options"] == {"--k": 3}
    update_manifest(tmp_path, shards=[SHARD])
    with pytest.raises(ValueError, match="started with --k 3, this run has --k 4"):
        pin_options(tmp_path, {"--k": 4})
    assert pin_options(tmp_path, {"--k": 3, "--method": "exact"})  # options not recorded: not compared
    assert read_manifest(tmp_path)["options"] == {"--k": 3}  # recorded only at the start
    unrecorded = tmp_path / "old"  # a set written before options were recorded ...
    pin_options(unrecorded, {})
    update_manifest(unrecorded, shards=[SHARD], options=None)
    pin_options(unrecorded, {"--k": 9})  # ... is resumed as before, and a run that fails
    assert read_manifest(unrecorded)["options"] is None  # later does not pin its values


def test_cocobank_and_world_refuse_a_changed_option(tmp_path, capsys):
    (tmp_path / "images").mkdir()
    (tmp_path / "instances.json").write_text(json.dumps({"images": [], "annotations": [], "categories": []}))
    args = ["prepare", "cocobank", "--instances", str(tmp_path / "instances.json"), "--images",
            str(tmp_path / "images"), "--out", str(tmp_path / "bank"), "--quiet"]
    assert main(args + ["--per-class", "5"]) == 0
    capsys.readouterr()
    assert main(args + ["--per-class", "6"]) == 2
    assert "this output was started with --per-class 5, this run has --per-class 6" in _one_error(capsys)
    assert main(args + ["--per-class", "5"]) == 0
    capsys.readouterr()

    recorded(tmp_path / "world", {"--size": 32, "--max-count": 10}, "build_options.json")
    assert main(["world", "build", "--out", str(tmp_path / "world"), "--size", "64"]) == 2
    assert "this output was started with --size 32, this run has --size 64" in _one_error(capsys)
    assert main(["world", "build", "--out", str(tmp_path / "world"), "--size", "32",
                 "--shard-size", "20"]) == 2  # the deprecated alias is --max-count
    err = capsys.readouterr().err
    assert "note: '--shard-size' is deprecated and will be removed in 0.3; use '--max-count'" in err
    assert "started with --max-count 10, this run has --max-count 20" in err
    assert not (tmp_path / "world" / "train").exists()


def test_world_build_bad_values_are_one_line(tmp_path, capsys):
    for extra, says in ((["--size", "4"], "--size 4: images need at least 16 pixels a side"),
                        (["--train-size", "0"], "--train-size 0: must be at least 1"),
                        (["--bench-scale", "0"], "--bench-scale 0.0: must be above 0")):
        assert main(["world", "build", "--out", str(tmp_path / "w")] + extra) == 2
        assert says in _one_error(capsys)


def test_shuffle_takes_src_and_out_and_the_old_positional_form(src, tmp_path, capsys):
    assert main(["shuffle", "--src", str(src), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    new = json.loads(capsys.readouterr().out)
    assert main(["shuffle", str(src), str(tmp_path / "b"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "note: 'shuffle SRC OUT' is deprecated and will be removed in 0.3; use " \
           "'shuffle --src SRC --out OUT'" in captured.err
    old = json.loads(captured.out)
    assert new["verified"] == old["verified"]
    assert [s["sha256"] for s in read_manifest(tmp_path / "a")["shards"]] == \
           [s["sha256"] for s in read_manifest(tmp_path / "b")["shards"]]


# ------------------------------------------------------------------ one writer per --out (S5)

HOLD = ("import sys\nfrom pathlib import Path\nfrom compclip import runlock\n"
        "locks = [runlock.acquire(Path(out)) for out in sys.argv[1:]]\n"
        "print('held', flush=True)\nsys.stdin.read()\n"
        "for lock in locks:\n    runlock.release(lock)\n")


@contextlib.contextmanager
def held(*outs: Path, repo_root: Path):
    """Another process holding the lock of each folder in `outs`, as a running writer does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, *map(str, outs)], cwd=repo_root,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def _captions_csv(tmp_path: Path) -> Path:
    path = tmp_path / "caps.csv"
    path.write_text("filepath,caption\nimg0.jpg,A red dog on a bench.\n")
    return path


LOCKED = {  # every writer: its command line (without --out), given the src set and a tmp folder
    "stitch": lambda src, tmp: ["stitch", "--bank", str(make_bank(tmp / "bank")), "--n", "4", "--canvas", "32"],
    "knn": lambda src, tmp: ["knn", "--src", str(src), "--arch", "micro-vit-32"],
    "genimages": lambda src, tmp: ["genimages", "--src", str(src)],
    "prepare coco": lambda src, tmp: ["prepare", "coco", *_coco_inputs(tmp)],
    "prepare trohn": lambda src, tmp: ["prepare", "trohn", "--dataset", "x", "--images-root", str(tmp)],
    "prepare cocobank": lambda src, tmp: ["prepare", "cocobank", *_instances(tmp)],
    "shuffle": lambda src, tmp: ["shuffle", "--src", str(src)],
    "negatives generate": lambda src, tmp: ["negatives", "generate", "--src", str(_captions_csv(tmp))],
    "world build": lambda src, tmp: ["world", "build", "--train-size", "4", "--bench-scale", "0.01"],
}


def _instances(tmp_path: Path) -> list[str]:
    (tmp_path / "images").mkdir(exist_ok=True)
    (tmp_path / "instances.json").write_text(json.dumps({"images": [], "annotations": [], "categories": []}))
    return ["--instances", str(tmp_path / "instances.json"), "--images", str(tmp_path / "images")]


def test_a_second_writer_on_a_locked_out_is_refused_naming_the_holder(src, tmp_path, capsys, repo_root):
    """Every writer takes the lock of its --out before its first write: while another process
    holds it, the command stops with one line naming that process (exit 2), having written
    nothing; the folder holds only the holder's lock."""
    outs = {name: tmp_path / name.replace(" ", "_") / "out" for name in LOCKED}
    with held(*outs.values(), repo_root=repo_root) as pid:
        for name, argv in LOCKED.items():
            out = outs[name]
            assert main(argv(src, out.parent) + ["--out", str(out)]) == 2, name
            line = _one_error(capsys)
            assert line.startswith(f"error: {out}: another run is writing this output (pid {pid} on "), line
            assert line.endswith(f"lock file {out / 'run.lock'}); wait for it to end or write to a new "
                                 f"--out; if that run is dead, delete {out / 'run.lock'}"), line
            assert sorted(p.name for p in out.iterdir()) == ["run.lock"], name  # nothing written
    assert not any((out / "run.lock").exists() for out in outs.values())  # the holder's, released


def _wait_for(path: Path, seconds: float = 60) -> None:
    for _ in range(int(seconds / 0.01)):
        if path.exists():
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} did not appear within {seconds} s")


def test_two_stitch_runs_with_other_canvases_do_not_mix(tmp_path, repo_root):
    """S5: a second `stitch --canvas 64` into the --out a running `stitch --canvas 32` writes is
    refused before it writes (before: both ran, the set ended `complete: true` with 32- and
    64-pixel images mixed); the first's shards are intact and all 32 x 32."""
    from PIL import Image
    from compclip.shardset.shards import iter_raw_samples, verify_shard_set
    bank, out = make_bank(tmp_path / "bank"), tmp_path / "lr"
    args = ["stitch", "--bank", str(bank), "--out", str(out), "--n", "200000", "--max-count", "20", "--quiet"]
    first = subprocess.Popen([sys.executable, "-m", "compclip.datagen", *args, "--canvas", "32"], cwd=repo_root,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(out / "manifest.json")  # the first has recorded its options (it took the lock before)
        second = subprocess.run([sys.executable, "-m", "compclip.datagen", *args, "--canvas", "64"], cwd=repo_root,
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr[-500:]
        assert second.stderr.startswith(f"error: {out}: another run is writing this output (pid {first.pid} on ")
        _wait_for(out / "shard-000001.tar")
        assert first.poll() is None
    finally:
        first.kill()
        first.wait(timeout=30)
    manifest = read_manifest(out)
    assert not manifest["complete"] and manifest["options"]["--canvas"] == "32x32"
    assert verify_shard_set(out, allow_incomplete=True)["samples"] == 20 * len(manifest["shards"])
    sizes = {Image.open(io.BytesIO(raw["jpg"])).size for shard in manifest["shards"]
             for raw in iter_raw_samples(out / shard["name"])}
    assert sizes == {(32, 32)}


def test_the_lock_of_a_killed_writer_is_taken_over_and_every_run_releases_it(tmp_path, capsys, repo_root):
    bank, out = make_bank(tmp_path / "bank"), tmp_path / "lr"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    out.mkdir()
    (out / "run.lock").write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(),
                                              "started": time.time() - 60, "slurm_job": None}))
    args = ["stitch", "--bank", str(bank), "--out", str(out), "--n", "4", "--canvas", "32", "--quiet"]
    assert main(args) == 0  # a lock whose process is gone (a killed run) is taken over, with a note
    assert str(out / "run.lock") in capsys.readouterr().err  # compclip.runlock's note names it
    assert not (out / "run.lock").exists()  # released at the end
    assert main(args[:-3] + ["--canvas", "48", "--quiet"]) == 2  # refused: released as well
    assert "this output was started with --canvas 32x32" in _one_error(capsys)
    assert not (out / "run.lock").exists()


# ------------------------------------------------------------------ inputs changed since the start

def _edit_set(path: Path) -> str:
    manifest = read_manifest(path)
    manifest["shards"][0]["sha256"] = "0" * 64  # as if the set had been rewritten
    (path / "manifest.json").write_text(json.dumps(manifest))
    return "shard hashes differ"


def _edit_file(path: Path) -> str:
    path.write_text(path.read_text() + " ")
    return "size "


def _edit_bank(path: Path) -> str:
    from PIL import Image
    Image.new("RGBA", (12, 10), (9, 9, 9, 255)).save(path / "grey_box.png")
    return "files 3 image files then, 4 image files now"


CHANGED_INPUTS = {  # command line (without --out), given a private copy of src and a tmp folder; input; edit
    "stitch": (lambda src, tmp: ["stitch", "--bank", str(make_bank(tmp / "bank")), "--n", "4"],
               lambda src, tmp: tmp / "bank", _edit_bank),
    "knn": (lambda src, tmp: ["knn", "--src", str(src), "--arch", "micro-vit-32"], lambda src, tmp: src, _edit_set),
    "genimages": (lambda src, tmp: ["genimages", "--src", str(src)], lambda src, tmp: src, _edit_set),
    "shuffle": (lambda src, tmp: ["shuffle", "--src", str(src)], lambda src, tmp: src, _edit_set),
    "prepare coco": (lambda src, tmp: ["prepare", "coco", *_coco_inputs(tmp)],
                     lambda src, tmp: tmp / "captions.json", _edit_file),
}


@pytest.mark.parametrize("name", sorted(CHANGED_INPUTS))
def test_every_writer_refuses_to_resume_from_a_changed_input(name, src, tmp_path, capsys):
    """A set records its inputs' fingerprints when it starts; a resume whose input differs is
    refused in one line naming the input and what changed (before: it resumed, mixing old and
    new input in one set), and nothing is written."""
    import shutil
    from compclip.shardset.fingerprint import fingerprint
    argv, which, edit = CHANGED_INPUTS[name]
    src = Path(shutil.copytree(src, tmp_path / "src"))
    argv, path = argv(src, tmp_path), which(src, tmp_path)
    out = tmp_path / "out"
    recorded(out, {})
    update_manifest(out, inputs={str(path.resolve()): fingerprint(path)})
    before = (out / "manifest.json").read_bytes()
    what = edit(path)
    assert main(argv + ["--out", str(out)]) == 2
    line = _one_error(capsys)
    assert line.startswith(f"error: {path}: this input changed since {out} was started ("), line
    assert what in line and line.endswith("); rerun with the input as it was, or write to a new --out"), line
    assert (out / "manifest.json").read_bytes() == before and sorted(p.name for p in out.iterdir()) == ["manifest.json"]


def test_cocobank_refuses_a_changed_instances_file(tmp_path, capsys):
    args = ["prepare", "cocobank", *_instances(tmp_path), "--out", str(tmp_path / "bank"), "--quiet"]
    assert main(args) == 0
    capsys.readouterr()
    _edit_file(tmp_path / "instances.json")
    assert main(args) == 2
    assert f"error: {tmp_path / 'instances.json'}: this input changed since {tmp_path / 'bank'} was started " \
           "(size " in _one_error(capsys)


# ------------------------------------------------------------------ a caption that is not UTF-8

def _set_with_a_bad_caption(src: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of `src` whose first shard's second caption has a byte that is not UTF-8 (the
    manifest's hashes updated, so only the caption is wrong); returns the shard and the key."""
    import hashlib
    import shutil
    bad = Path(shutil.copytree(src, tmp_path / "bad"))
    shard = bad / read_manifest(bad)["shards"][0]["name"]
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar if m.isfile()]
    key = sorted({m.name.split(".")[0] for m, _ in members})[1]
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in members:
            if member.name == f"{key}.txt":
                data = b"a red \xff box"
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    manifest = read_manifest(bad)
    manifest["shards"][0].update(sha256=hashlib.sha256(shard.read_bytes()).hexdigest(), bytes=shard.stat().st_size)
    (bad / "manifest.json").write_text(json.dumps(manifest))
    return shard, key


@pytest.mark.parametrize("cmd", [["shuffle"], ["knn", "--arch", "micro-vit-32"]])
def test_a_caption_that_is_not_utf8_is_named_by_sample_and_shard(cmd, src, tmp_path, capsys):
    """Before: `'utf-8' codec can't decode byte 0xff in position 6`, naming no sample."""
    shard, key = _set_with_a_bad_caption(src, tmp_path)
    out = tmp_path / "out"
    assert main(cmd + ["--src", str(shard.parent), "--out", str(out), "--quiet"]) == 2
    assert _one_error(capsys) == (f"error: sample '{key}' in {shard}: member 'txt' is not UTF-8 text "
                                  "(byte 6: b'\\xff')")
    assert not read_manifest(out)["complete"]


def test_stitch_stopped_by_a_fault_then_rerun_with_an_edited_bank_is_refused(tmp_path, capsys, monkeypatch):
    """A run that ended part way (a fault, exit 3), its bank edited, then rerun: before, exit 0
    with pairs of the old and the new bank in one set; now one line, nothing written."""
    bank, out = make_bank(tmp_path / "bank"), tmp_path / "o"
    args = ["stitch", "--bank", str(bank), "--out", str(out), "--n", "6", "--canvas", "32",
            "--max-count", "2", "--quiet"]
    real, calls = TarWriter.add, []  # every shard member is written by TarWriter.add

    def fail_after_a_while(self, name, value):
        calls.append(name)
        if len(calls) > 20:
            raise OSError(errno.EIO, "Input/output error", self.file.name)
        return real(self, name, value)
    monkeypatch.setattr(TarWriter, "add", fail_after_a_while)
    assert main(args) == 3
    monkeypatch.setattr(TarWriter, "add", real)
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(read_manifest(out)["shards"]) >= 1
    _edit_bank(bank)
    assert main(args) == 2
    assert _one_error(capsys) == (f"error: {bank}: this input changed since {out} was started (files 3 image "
                                  "files then, 4 image files now); rerun with the input as it was, or write "
                                  "to a new --out")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
