"""`logging.report_to`: trackers by accelerate's `log_with` names. TensorBoard stays in
`<run>/tensorboard` (default `[tensorboard]`); W&B, offline (`WANDB_MODE=offline`), gets the same
scalars at the same steps in `<run>/wandb/offline-run-*/run-*.wandb`, read here record by record
(the file is a LevelDB-style log of wandb's protobuf `Record`s). Unknown or uninstalled trackers
and a repeated name are refused in the pre-flight in one line."""
import json
import struct
from pathlib import Path

import pytest

from tests.fixtures.trainer_data import train_in_process as run, write_fixture_shards

RECIPE = """
name: trk
seed: 3
model: {{arch: micro-vit-32}}
data: {{train_shards: ["{shards}"], samples_per_epoch: 16, batch_size: 8, workers: 0, shuffle_buffer: 16,
        partner: generated}}
negatives: {{per_image: 2}}
optim: {{lr: 1.0e-3}}
schedule: {{epochs: 1, warmup_steps: 1}}
logging: {{output_dir: "{out}", every_n_steps: 1, progress: false}}
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_fixture_shards(tmp_path_factory.mktemp("trk") / "set", n=32, partner="generated")


@pytest.fixture
def recipe(tmp_path, shards):
    path = tmp_path / "trk.yaml"
    path.write_text(RECIPE.format(shards=shards, out=tmp_path / "runs"))
    return path


def tensorboard_scalars(folder: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def wandb_history(path: Path) -> list[dict]:
    """The history rows of a .wandb file: a 7-byte ':W&B' header, then LevelDB log records
    (32 KiB blocks; 7-byte record headers: crc, length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    rows, pos, part = [], 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        part += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            part = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


def test_wandb_offline_gets_the_tensorboard_scalars(recipe, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'compclip[wandb]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert run([recipe, "logging.report_to=[tensorboard, wandb]"]) == 0
    run_dir = tmp_path / "runs" / "trk"
    board = tensorboard_scalars(run_dir / "tensorboard")
    assert board["train/loss"].keys() == {1, 2}
    files = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    logged: dict[str, dict[int, float]] = {}
    for row in wandb_history(files[0]):
        for key, value in row.items():
            if not key.startswith("_"):
                logged.setdefault(key, {})[row["_step"]] = value
    assert set(logged) == set(board)
    for tag, points in board.items():
        assert logged[tag].keys() == points.keys(), tag
        for step, value in points.items():
            assert logged[tag][step] == pytest.approx(value, rel=1e-6), (tag, step)


def test_default_is_tensorboard_only_and_an_empty_list_writes_none(recipe, tmp_path):
    assert run([recipe]) == 0
    run_dir = tmp_path / "runs" / "trk"
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert not (run_dir / "wandb").exists()
    assert run([recipe, "logging.report_to=[]", "logging.run_name=none"]) == 0
    assert not (tmp_path / "runs" / "none" / "tensorboard").exists()


@pytest.mark.parametrize("value, words", [
    ("[tensorboard, wandbb]", "logging.report_to: unknown tracker 'wandbb'; accelerate's trackers are "),
    ("[aim]", "logging.report_to: tracker 'aim' needs the package aim, which is not installed"),
    ("[wandb, wandb]", "report_to names wandb more than once"),
])
def test_bad_trackers_are_refused_in_one_line(recipe, value, words, capsys):
    if "aim" in value:
        pytest.importorskip("accelerate.utils").is_aim_available() and pytest.skip("aim is installed here")
    assert run([recipe, f"logging.report_to={value}", "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err, err
