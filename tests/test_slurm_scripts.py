"""launch/slurm_train.sh and launch/slurm_datagen_array.sh run with stub `srun`, `scontrol`,
`sbatch`, `accelerate` and `python` on PATH (each records its argv, one argument per line; the
stub srun runs its command as node 0): overrides arrive whole, the log folder exists, and the
datagen array's worker count is its CPU request. Requeueing is tested in tests/test_trainer_stop.py."""
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "launch" / "slurm_train.sh"
DATAGEN = ROOT / "launch" / "slurm_datagen_array.sh"
OVERRIDE = "eval.benchmarks=[visla, aro]"

RECORD = '{ printf "%s\\n" "$@"; echo "--- end"; } >> "$STUB_DIR/$(basename "$0").argv"\n'
STUBS = {
    "srun": RECORD + 'while [ "${1#--}" != "$1" ]; do shift; done\nSLURM_NODEID=0 exec "$@"\n',
    "scontrol": RECORD + '[ "$1" = show ] && echo node-a\nexit 0\n',
    "sbatch": RECORD + 'echo "Submitted batch job 77"\n',
    "accelerate": RECORD,
    "python": RECORD,
}


def stub_env(tmp_path: Path, **env: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    full = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    full.update(PATH=f"{bin_dir}:{os.environ['PATH']}", STUB_DIR=str(tmp_path), **env)
    return full


def calls(tmp_path: Path, name: str) -> list[list[str]]:
    """Each call's argv of stub `name`."""
    path = tmp_path / f"{name}.argv"
    if not path.exists():
        return []
    return [c.strip("\n").split("\n") if c.strip("\n") else []
            for c in path.read_text().split("--- end\n")[:-1]]


def run(script: Path, args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    work = tmp_path / "submit_dir"
    work.mkdir(exist_ok=True)
    done = subprocess.run(["bash", str(script), *args], cwd=work, env=stub_env(tmp_path, **env),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def output_folder(script: Path) -> str:
    return os.path.dirname(re.search(r"^#SBATCH --output=(\S+)$", script.read_text(), re.M).group(1))


JOB = {"SLURM_JOB_ID": "123", "SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_NNODES": "2"}


def test_an_override_with_a_space_reaches_pre_flight_and_trainer_as_one_argument(tmp_path):
    run(TRAIN, ["recipes/negclip.yaml", OVERRIDE, "optim.lr=1e-5"], tmp_path, **JOB)
    [check] = calls(tmp_path, "python")
    assert check == ["-m", "trainer", "recipes/negclip.yaml", "checkpoint.resume=auto", OVERRIDE,
                     "optim.lr=1e-5", "--check"]
    [launch] = calls(tmp_path, "accelerate")
    assert launch[-5:] == ["trainer/train.py", "recipes/negclip.yaml", "checkpoint.resume=auto",
                           OVERRIDE, "optim.lr=1e-5"]
    assert launch[launch.index("--machine_rank") + 1] == "0"  # read on the node
    assert launch[launch.index("--num_processes") + 1] == "16"
    assert launch[launch.index("--main_process_ip") + 1] == "node-a"


def test_an_accelerate_config_path_with_a_space_stays_whole(tmp_path):
    run(TRAIN, ["recipes/negclip.yaml"], tmp_path, ACCELERATE_CONFIG="my configs/8 gpus.yaml", **JOB)
    [launch] = calls(tmp_path, "accelerate")
    assert launch[launch.index("--config_file") + 1] == "my configs/8 gpus.yaml"


def test_the_train_script_creates_its_log_folder_in_a_job(tmp_path):
    run(TRAIN, ["recipes/negclip.yaml"], tmp_path, **JOB)
    assert (tmp_path / "submit_dir" / output_folder(TRAIN)).is_dir()


def test_run_by_hand_the_train_script_creates_the_log_folder_and_submits_itself(tmp_path):
    done = run(TRAIN, ["--nodes=4", "--time=2:00:00", "recipes/negclip.yaml", OVERRIDE], tmp_path)
    assert output_folder(TRAIN) == "logs" and (tmp_path / "submit_dir" / "logs").is_dir()
    assert calls(tmp_path, "sbatch") == [["--nodes=4", "--time=2:00:00", str(TRAIN), "recipes/negclip.yaml",
                                          OVERRIDE]]
    assert calls(tmp_path, "python") == [] and calls(tmp_path, "srun") == []
    assert "Submitted batch job 77" in done.stdout


def datagen_env(tmp_path: Path, **env: str) -> dict[str, str]:
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(2):
        (parts / f"p{i}.tsv").write_text("caption\na dog\n")
    return dict(SLURM_JOB_ID="5", SLURM_ARRAY_TASK_ID="1", VOCAB="vocab.json", **env)


def test_datagen_workers_follow_the_cpu_request(tmp_path):
    run(DATAGEN, [str(tmp_path / "parts"), "out"], tmp_path, **datagen_env(tmp_path, SLURM_CPUS_PER_TASK="6"))
    [gen] = calls(tmp_path, "python")
    assert gen[gen.index("--workers") + 1] == "6"
    assert gen[gen.index("--src") + 1] == str(tmp_path / "parts" / "p1.tsv")
    assert gen[gen.index("--out") + 1] == "out/part-00001"
    assert (tmp_path / "submit_dir" / output_folder(DATAGEN)).is_dir()


def test_run_by_hand_the_datagen_array_creates_the_log_folder_and_submits_itself(tmp_path):
    run(DATAGEN, ["--array=0-1", "parts", "out"], tmp_path)
    assert (tmp_path / "submit_dir" / output_folder(DATAGEN)).is_dir()
    assert calls(tmp_path, "sbatch") == [["--array=0-1", str(DATAGEN), "parts", "out"]]
