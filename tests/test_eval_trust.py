"""What eval trusts and what it refuses: CIFAR pickles that name anything but numpy's array
reconstruction, checkpoints with non-finite weights, benchmark files that differ from their
pinned sha256 (hashed once per size and mtime), and bad --batch-size / --device values."""
import copy
import json
import os
import pickle
import pickletools
import shutil
import struct

import numpy as np
import pytest
import torch

from compclip.eval import checksums
from compclip.eval.api import missing_data, run
from compclip.eval.benchmarks.base import MissingData
from compclip.eval.benchmarks.zeroshot import _unpickle
from compclip.eval.cli import main
from compclip.eval.scorer import TextScorer
from tests.fixtures.eval_data import make_data_root
from compclip.models import CheckpointMeta, save_checkpoint


def score(capsys, *args):
    rc = main(["score", *args, "--quiet", "--no-plots"])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


@pytest.fixture
def no_model_load(monkeypatch):
    from compclip import models

    def must_not_load(*a, **k):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(models, "load_model", must_not_load)


# --- S2: CIFAR pickles ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return make_data_root(tmp_path_factory.mktemp("trust") / "data", n=2, seed=1)


class Payload:
    """Unpickled, it would create `marker` (what a planted pickle could do with any callable)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def zeroshot_root(synthetic, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(synthetic / "zeroshot", root / "zeroshot")
    checksums.mark_local(root, "test")
    return root


@pytest.mark.parametrize("planted", ["cifar-10-batches-py/test_batch", "cifar-10-batches-py/batches.meta",
                                     "cifar-100-python/meta"])
def test_a_planted_cifar_pickle_runs_nothing_and_is_named(capsys, synthetic, tmp_path, planted, no_model_load):
    root = zeroshot_root(synthetic, tmp_path)
    marker = tmp_path / "marker"
    target = root / "zeroshot" / planted
    legit = {"labels": [1, 2], "data": np.zeros((2, 3072), np.uint8)}  # decoded first, then the payload
    target.write_bytes(pickle.dumps({**legit, "label_names": Payload(marker)}, protocol=4))
    rc, out, err = score(capsys, "--model", "micro-vit-32", "--pretrained", "none", "--benchmarks", "zeroshot",
                         "--data-root", str(root))
    assert not marker.exists()
    assert rc == 2 and "Traceback" not in err
    assert err.startswith(f"error: benchmark data changed or unreadable under {root} for zeroshot")
    problem = next(line for line in err.splitlines() if str(target) in line)
    assert (f"zeroshot: malformed: {target}: not a CIFAR python pickle (it names io.open, which no "
            "official CIFAR file does; refused without calling it)") in problem
    assert problem.endswith(f"-> python -m eval download --benchmarks zeroshot --data-root {root} --force")


def test_a_global_outside_the_allowed_three_is_refused_even_from_numpy(tmp_path):
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8)}, protocol=5))  # numpy's _frombuffer
    with pytest.raises(ValueError, match=r"test_batch: not a CIFAR python pickle \(it names "
                                         r"numpy\._core\.numeric\._frombuffer"):
        _unpickle(path)


def _py2_pickle(obj) -> bytes:
    """`obj` as Python 2's cPickle wrote the official CIFAR files (protocol 2; str as byte strings,
    numpy arrays through numpy.core.multiarray._reconstruct), without memo opcodes."""
    def s(text: bytes) -> bytes:
        return b"U" + bytes([len(text)]) + text if len(text) < 256 else b"T" + struct.pack("<I", len(text)) + text

    def i(n: int) -> bytes:
        return b"K" + bytes([n]) if 0 <= n < 256 else b"J" + struct.pack("<i", n)

    def enc(x) -> bytes:
        if isinstance(x, dict):
            return b"}(" + b"".join(enc(k) + enc(v) for k, v in x.items()) + b"u"
        if isinstance(x, list):
            return b"](" + b"".join(enc(v) for v in x) + b"e"
        if isinstance(x, int):
            return i(x)
        if isinstance(x, str):
            return s(x.encode("latin1"))
        assert isinstance(x, np.ndarray) and x.dtype == np.uint8
        dtype = b"cnumpy\ndtype\n" + s(b"u1") + i(0) + i(1) + b"\x87R(" + i(3) + s(b"|") + b"NNN" + i(-1) + i(-1) \
            + i(0) + b"tb"
        shape = b"(" + b"".join(i(d) if d < 256 else b"M" + struct.pack("<H", d) for d in x.shape) + b"t"
        return (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + i(0) + b"\x85" + s(b"b") + b"\x87R("
                + i(1) + shape + dtype + b"\x89" + s(x.tobytes()) + b"tb")
    return b"\x80\x02" + enc(obj) + b"."


def test_official_cifar_layout_and_the_synthetic_pickles_load(synthetic, tmp_path):
    images = np.arange(4 * 3072, dtype=np.int64).astype(np.uint8).reshape(4, 3072)
    batch = {"batch_label": "testing batch 1 of 1", "labels": [3, 8, 8, 0], "data": images,
             "filenames": ["a.png", "b.png", "c.png", "d.png"]}
    path = tmp_path / "test_batch"
    path.write_bytes(_py2_pickle(batch))
    named = {arg for op, arg, _ in pickletools.genops(path.read_bytes()) if op.name == "GLOBAL"}
    assert named == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}  # as in the files
    got = _unpickle(path)
    assert got["labels"] == [3, 8, 8, 0] and got["filenames"][0] == "a.png"
    assert np.array_equal(got["data"], images) and got["data"].dtype == np.uint8
    meta = tmp_path / "batches.meta"
    meta.write_bytes(_py2_pickle({"num_cases_per_batch": 10000, "label_names": ["airplane", "cat"], "num_vis": 3072}))
    assert _unpickle(meta)["label_names"] == ["airplane", "cat"]

    from compclip.eval.registry import get_benchmark
    bench = get_benchmark("zeroshot").load(zeroshot_root(synthetic, tmp_path))
    assert set(bench.sets) == {"cifar10", "cifar100"} and len(bench.sets["cifar100"][2]) == 100


# --- S3: non-finite weights -------------------------------------------------------------------

@pytest.fixture(scope="module")
def nan_checkpoint(tmp_path_factory, micro_model):
    model = copy.deepcopy(micro_model.model)
    with torch.no_grad():
        weight = model.visual.conv1.weight.view(-1)
        weight[:3] = float("nan")
        model.text_projection.view(-1)[0] = float("inf")
    meta = CheckpointMeta(arch="micro-vit-32", activation="gelu", lineage="none", step=7)
    return save_checkpoint(tmp_path_factory.mktemp("runs") / "diverged" / "checkpoints", "step-0000007", model, meta)


def test_a_checkpoint_with_nan_weights_is_refused_before_any_model_loads(capsys, synthetic, nan_checkpoint,
                                                                         no_model_load):
    rc, out, err = score(capsys, "--pretrained", str(nan_checkpoint), "--benchmarks", "sugarcrepe",
                         "--data-root", str(synthetic))
    assert rc == 2 and out == "" and "Traceback" not in err
    assert errors(err) == [f"error: {nan_checkpoint}: 4 non-finite weight value(s) (NaN or inf) in 2 of "
                           f"{len(torch.load(nan_checkpoint, weights_only=True)['state_dict'])} tensors "
                           "(first: text_projection); scored, they would give NaN ties, not results: give an "
                           "earlier checkpoint of the run (step-*.pt in its checkpoints/ folder)"]


def test_nan_weights_are_refused_right_after_loading_too(capsys, monkeypatch, synthetic, nan_checkpoint):
    import compclip.eval.weights as eval_weights
    monkeypatch.setattr(eval_weights, "file_state", lambda path: None)  # as for a format the file check skips
    rc, out, err = score(capsys, "--pretrained", str(nan_checkpoint.parent), "--benchmarks", "sugarcrepe",
                         "--data-root", str(synthetic))
    assert rc == 2 and out == ""
    assert len(errors(err)) == 1 and errors(err)[0].startswith(f"error: {nan_checkpoint}: 4 non-finite weight value(s)")


# --- S6: pinned sha256 checked at every use -------------------------------------------------

class WordCounts(TextScorer):
    name = "word-counts"

    def encode_texts(self, texts):
        out = torch.zeros(len(texts), 64)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, hash(w) % 64] += 1
        return out


@pytest.fixture
def real_visla(tmp_path, shared_benchmarks):
    """A data root holding copies of the published VISLA files."""
    root = tmp_path / "data"
    shutil.copytree(shared_benchmarks / "visla", root / "visla")
    checksums._VERIFIED.clear()
    return root


def test_a_pinned_file_edited_by_one_byte_is_refused_and_the_published_one_scored(
        capsys, real_visla, shared_benchmarks, no_model_load):
    target = real_visla / "visla" / "Generic_VISLA.tsv"
    data = bytearray(target.read_bytes())
    data[500] ^= 0x01
    target.write_bytes(bytes(data))
    lines = missing_data(["visla"], real_visla, require_images=False)
    assert lines == [f"visla: {target} is not the published file (sha256 {checksums.digest(target)[:16]}..., pinned "
                     f"99cad867a688d70a...: edited or replaced); fetch it again (for data of your own in this format, "
                     f"put local_benchmarks.json in the data root) -> python -m eval download --benchmarks visla "
                     f"--data-root {real_visla} --force"]
    with pytest.raises(MissingData, match="Generic_VISLA.tsv is not the published file"):
        run(WordCounts(), ["visla"], str(real_visla), progress=False, reuse=False)
    rc, out, err = score(capsys, "--model", "micro-vit-32", "--pretrained", "none", "--benchmarks", "visla",
                         "--data-root", str(real_visla))
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"error: benchmark data changed or unreadable under {real_visla} for visla")
    assert f"\n  {lines[0]}\n" in err
    assert f"python -m eval download --benchmarks visla --data-root {real_visla} --force" in err.splitlines()[-1]

    shutil.copy(shared_benchmarks / "visla" / "Generic_VISLA.tsv", target)  # restored: scored
    result = run(WordCounts(), ["visla"], str(real_visla), progress=False, reuse=False)["visla"]
    assert result.counts == {"generic": 973, "spatial": 640}


def test_left_right_mining_nouns_from_an_edited_pinned_file_refuses_it(real_visla):
    """Without ARO's file, left_right reads the VISLA text: the same pins apply."""
    target = real_visla / "visla" / "Spatial_VISLA.tsv"
    target.write_bytes(target.read_bytes().replace(b"dog", b"cat", 1))
    with pytest.raises(MissingData, match="left_right: .*Spatial_VISLA.tsv is not the published file"):
        run(WordCounts(), ["left_right"], str(real_visla), progress=False, reuse=False)


def test_a_pinned_file_is_hashed_once_per_size_and_mtime(monkeypatch, real_visla):
    calls = []
    digest = checksums.digest
    monkeypatch.setattr(checksums, "digest", lambda path, algo="sha256": calls.append(path) or digest(path, algo))
    assert missing_data(["visla"], real_visla, require_images=False) == []
    assert sorted(p.name for p in calls) == ["Generic_VISLA.tsv", "Spatial_VISLA.tsv"]
    cached = json.loads((real_visla / checksums.CACHE).read_text())["files"]
    generic = real_visla / "visla" / "Generic_VISLA.tsv"
    assert cached["visla/Generic_VISLA.tsv"] == {"size": generic.stat().st_size, "mtime_ns": generic.stat().st_mtime_ns,
                                                 "sha256": checksums.PINNED["visla/Generic_VISLA.tsv"]}
    checksums._VERIFIED.clear()  # a new process: the cache file answers
    run(WordCounts(), ["visla"], str(real_visla), progress=False, reuse=False)
    assert len(calls) == 2
    st = generic.stat()
    os.utime(generic, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))  # touched: hashed again
    assert missing_data(["visla"], real_visla, require_images=False) == [] and len(calls) == 3


def test_a_cache_that_cannot_be_written_or_read_changes_nothing(monkeypatch, real_visla):
    (real_visla / checksums.CACHE).write_text("{not json")
    write = checksums._write_json

    def read_only(root, name, data):
        if name == checksums.CACHE:
            raise PermissionError(13, "Permission denied", str(root / name))
        write(root, name, data)
    monkeypatch.setattr(checksums, "_write_json", read_only)
    assert missing_data(["visla"], real_visla, require_images=False) == []
    (real_visla / "visla" / "Spatial_VISLA.tsv").write_bytes(b"image\tsent1\tsent2\r\n")
    assert "Spatial_VISLA.tsv is not the published file" in missing_data(["visla"], real_visla,
                                                                          require_images=False)[0]


def test_the_first_line_says_missing_changed_or_both(tmp_path):
    from compclip.eval.benchmarks.base import Problem
    absent = Problem("visla", "x not found", str(tmp_path), "visla")
    changed = Problem("sugarcrepe", "y is not the published file", str(tmp_path), "sugarcrepe", force=True)
    for problems, says in (([absent], "missing"), ([changed], "changed or unreadable"),
                           ([absent, changed], "missing, changed or unreadable")):
        assert str(MissingData(problems, tmp_path)).startswith(f"benchmark data {says} under {tmp_path} for ")


@pytest.mark.parametrize("marker", checksums.LOCAL_MARKERS)
def test_local_data_roots_keep_their_own_files(real_visla, marker):
    target = real_visla / "visla" / "Generic_VISLA.tsv"
    target.write_bytes(target.read_bytes().replace(b"bus", b"car", 1))
    assert len(missing_data(["visla"], real_visla, require_images=False)) == 1
    (real_visla / marker).write_text("{}")
    assert missing_data(["visla"], real_visla, require_images=False) == []


# --- --batch-size, --device -------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-3", "abc"])
def test_batch_size_below_one_is_a_usage_error(capsys, tmp_path, value, no_model_load):
    with pytest.raises(SystemExit) as done:
        main(["score", "--model", "micro-vit-32", "--pretrained", "none", "--benchmarks", "visla",
              "--data-root", str(tmp_path), "--batch-size", value])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.splitlines() == [
        f"error: python -m eval score: argument --batch-size: '{value}' is not a whole number of at least 1; "
        "see python -m eval score --help"]


@pytest.mark.parametrize("device, says", [
    ("banana", "error: --device banana: not a torch device name; give cpu, cuda, cuda:N or mps"),
    ("cuda:99", "error: --device cuda:99: torch cannot use it here (")])
def test_a_device_torch_cannot_use_is_refused_before_anything_else(capsys, tmp_path, device, says, no_model_load):
    rc, out, err = score(capsys, "--model", "micro-vit-32", "--pretrained", "none", "--benchmarks", "visla",
                         "--data-root", str(tmp_path / "empty"), "--device", device)  # the data check comes later
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(says) and err.rstrip().endswith(("or mps", "; give cpu, or a device this machine has"))
