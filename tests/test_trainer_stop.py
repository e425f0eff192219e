"""Preemption and stalled ranks, in-process and without SLURM (issue "trust"): SIGTERM / SIGUSR1
stop the run at a step boundary with a checkpoint (exit 75) and the rerun continues it;
`distributed.timeout_minutes` validated and turned into one line; the run lock of an ended SLURM
job on another node is taken over (squeue stubbed); `launch/slurm_train.sh` run with fake
`python`, `scontrol` and `srun` requeues after a stop and not otherwise.
The multi-process versions (resume bit-identical, a stalled rank) are in
tests/test_trainer_multiproc_faults.py."""
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from tests.fixtures.faults import after_step, no_step_faults
from tests.fixtures.trainer_data import train_in_process as run
from tests.test_trainer import shards  # noqa: F401 (a fixture)
from tests.test_trainer_reliability import fake_eval, recipe  # noqa: F401 (fixtures)
from compclip import runlock
from compclip.trainer import loop
from compclip.trainer.recipe import RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_sudden_death():
    """Before the trainer handled SIGTERM / SIGUSR1 their default action would end pytest itself:
    here they raise KeyboardInterrupt instead (the trainer replaces and then restores these)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def signal_at(monkeypatch, step: int, sig: signal.Signals) -> None:
    """The run sends itself `sig` right after `step` (`tests.fixtures.faults.after_step`)."""
    after_step(step, lambda at: os.kill(os.getpid(), sig), monkeypatch)


def ckpts(tmp_path) -> Path:
    return tmp_path / "runs" / "tiny" / "checkpoints"


def weights(tmp_path) -> dict:
    folder = ckpts(tmp_path)
    return torch.load(folder / (folder / "latest").read_text().strip())["state_dict"]


# --- SIGTERM / SIGUSR1 ------------------------------------------------------------------------------

def test_sigterm_mid_epoch_checkpoints_that_step_and_exits_75(recipe, tmp_path, monkeypatch, capsys,
                                                             no_sudden_death):
    """4 steps an epoch, 2 epochs, a checkpoint every 5 steps: SIGTERM during step 6 (epoch 1)
    stops the run after step 6 with its checkpoint; the rerun resumes there and ends with the
    weights of an uninterrupted run."""
    assert run([recipe, "checkpoint.every_n_steps=5", "logging.run_name=full"]) == 0
    signal_at(monkeypatch, 6, signal.SIGTERM)
    args = [recipe, "checkpoint.every_n_steps=5", "checkpoint.resume=auto"]
    capsys.readouterr()
    assert run(args) == 75
    out, err = capsys.readouterr()
    folder = ckpts(tmp_path)
    stop = [l for l in err.splitlines() if l.startswith("stopped by")]
    assert stop == [f"stopped by SIGTERM at step 6 (epoch 1); checkpoint {folder / 'step-0000006.pt'}; "
                    f"rerun the same command to continue"]
    assert "error" not in err
    assert out.strip().splitlines()[-2] == f"last checkpoint: {folder / 'step-0000006.pt'}"
    assert (folder / "latest").read_text().strip() == "step-0000006.pt"
    assert not (folder.parent / "run.lock").exists()
    assert signal.getsignal(signal.SIGTERM).__name__ == "interrupt"  # the handler before the run is back
    no_step_faults(monkeypatch)
    assert run(args) == 0
    assert "resumed from" in capsys.readouterr().err
    full = torch.load(tmp_path / "runs" / "full" / "checkpoints" / "step-0000008.pt")["state_dict"]
    got = weights(tmp_path)
    assert all(torch.equal(full[k], got[k]) for k in full)


def test_sigusr1_at_an_epoch_end_leaves_the_evaluation_to_the_rerun(recipe, tmp_path, monkeypatch, capsys,
                                                                   fake_eval, no_sudden_death):
    """SIGUSR1 during an epoch's last step: the epoch's checkpoint is written, its evaluation is not
    run (exit 75 at once); the rerun evaluates that step first, then trains on."""
    args = [recipe, "eval.benchmarks=[fake]", "eval.data_root=/x", "checkpoint.resume=auto"]
    signal_at(monkeypatch, 4, signal.SIGUSR1)
    assert run(args) == 75
    err = capsys.readouterr().err
    assert "stopped by SIGUSR1 at step 4 (epoch 1)" in err and "eval step" not in err
    run_dir = tmp_path / "runs" / "tiny"
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step-0000004.pt"
    assert not (run_dir / "eval.jsonl").exists()
    no_step_faults(monkeypatch)
    assert run(args) == 0
    err = capsys.readouterr().err
    assert [l.split(":")[0] for l in err.splitlines() if l.startswith("eval step")] == [
        "eval step 4 (epoch 1)", "eval step 8 (epoch 2)"]
    assert [json.loads(l)["step"] for l in (run_dir / "eval.jsonl").read_text().splitlines()] == [4, 8]


def test_a_step_that_has_its_checkpoint_is_not_written_twice(recipe, tmp_path, monkeypatch, capsys,
                                                            no_sudden_death):
    signal_at(monkeypatch, 5, signal.SIGTERM)
    assert run([recipe, "checkpoint.every_n_steps=5", "checkpoint.keep_last=5"]) == 75
    assert "stopped by SIGTERM at step 5 (epoch 1)" in capsys.readouterr().err
    names = sorted(p.name for p in ckpts(tmp_path).glob("step-*.pt"))
    assert names == ["step-0000004.pt", "step-0000005.pt"]


# --- distributed.timeout_minutes ----------------------------------------------------------------------

def test_timeout_key_defaults_validates_and_allows_fractions(recipe):
    assert load_recipe(recipe).distributed.timeout_minutes == 30.0
    assert load_recipe(recipe, ["distributed.timeout_minutes=0.05"]).distributed.timeout_minutes == 0.05
    assert load_recipe(recipe, ["distributed.timeout_minutes=10"]).distributed.timeout_minutes == 10
    with pytest.raises(RecipeError, match=r"key 'distributed.timeout_minutes': Input should be greater than 0"):
        load_recipe(recipe, ["distributed.timeout_minutes=0"])
    with pytest.raises(RecipeError, match=r"unknown key 'distributed.timeout_minute' \(did you mean "
                                          r"'distributed.timeout_minutes'\?\)"):
        load_recipe(recipe, ["distributed.timeout_minute=5"])


def test_a_collective_timeout_is_recognised_and_named_in_one_line(recipe):
    gloo = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                        "waiting 6000ms for recv operation to complete")
    assert loop.collective_timed_out(gloo)
    assert not loop.collective_timed_out(RuntimeError("DataLoader worker (pid 7) is killed by signal"))
    assert not loop.collective_timed_out(ValueError("Timed out waiting 6000ms for recv operation"))
    line = loop.collective_timeout_message(load_recipe(recipe, ["distributed.timeout_minutes=0.1"]), 1)
    assert line.startswith("rank 1: a collective timed out after 0.1 min (another rank stalled or died); ")
    assert "\n" not in line and "distributed.timeout_minutes" in line


# --- the run lock of an earlier SLURM job on another node ------------------------------------------

def other_node_lock(folder: Path, job) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.lock"
    path.write_text(json.dumps({"pid": 4242, "host": "node-elsewhere", "started": 1.0e9, "slurm_job": job}))
    return path


@pytest.fixture
def squeue(monkeypatch):
    """Stubs `runlock.slurm_job_state`; `answer["state"]` is what it says, `asked` the jobs asked."""
    answer, asked = {"state": None}, []

    def state(job):
        asked.append(job)
        return answer["state"]
    monkeypatch.setattr(runlock, "slurm_job_state", state)
    monkeypatch.setenv("SLURM_JOB_ID", "2002")
    return answer, asked


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETING", "PENDING", "SUSPENDED", None])
def test_a_lock_of_a_slurm_job_that_may_still_run_is_refused(tmp_path, squeue, state):
    """Running, finishing, pending or unknown because squeue cannot be asked (None): refused with
    the message naming the holder."""
    answer, asked = squeue
    answer["state"] = state
    lock = other_node_lock(tmp_path / "run", "1001")
    with pytest.raises(runlock.RunLocked, match=r"is in use by another run \(pid 4242 on node-elsewhere, .*"
                                                r"SLURM job 1001; lock file .*if that run is dead, delete"):
        runlock.acquire(tmp_path / "run")
    assert set(asked) == {"1001"} and lock.exists()


@pytest.mark.parametrize("state, words", [("", "squeue no longer lists it"), ("COMPLETED", "squeue: COMPLETED"),
                                          ("TIMEOUT", "squeue: TIMEOUT"), ("PREEMPTED", "squeue: PREEMPTED")])
def test_a_lock_of_an_ended_slurm_job_on_another_node_is_taken_over(tmp_path, squeue, state, words):
    answer, asked = squeue
    answer["state"] = state
    lock = other_node_lock(tmp_path / "run", "1001")
    notes = []
    runlock.check(tmp_path / "run")  # pre-flight passes
    assert runlock.acquire(tmp_path / "run", note=notes.append) == lock
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert notes == [f"taking over the lock {lock} of a dead run (pid 4242 on node-elsewhere, started "
                     f"{runlock._now_text(1.0e9)}, SLURM job 1001): SLURM job 1001 no longer runs ({words})"]
    runlock.release(lock)


def test_slurm_is_asked_only_under_slurm_and_for_a_slurm_lock(tmp_path, squeue, monkeypatch):
    answer, asked = squeue
    answer["state"] = ""
    other_node_lock(tmp_path / "a", None)  # the lock names no SLURM job
    with pytest.raises(runlock.RunLocked):
        runlock.acquire(tmp_path / "a")
    monkeypatch.delenv("SLURM_JOB_ID")  # this process is not under SLURM
    other_node_lock(tmp_path / "b", "1001")
    with pytest.raises(runlock.RunLocked):
        runlock.acquire(tmp_path / "b")
    assert asked == []


def test_a_requeued_jobs_own_lock_is_taken_over_without_asking(tmp_path, squeue, monkeypatch):
    answer, asked = squeue
    answer["state"] = "RUNNING"  # squeue lists the requeued job itself as running
    lock = other_node_lock(tmp_path / "run", "2002")
    notes = []
    assert runlock.acquire(tmp_path / "run", note=notes.append) == lock
    assert asked == [] and "it is this SLURM job's (2002) earlier attempt" in notes[0]
    runlock.release(lock)


def fake(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


@pytest.mark.parametrize("script, stderr, expected", [
    ('echo RUNNING', "", "RUNNING"),
    ('echo COMPLETED', "", "COMPLETED"),
    ('echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1', "", ""),
    ('echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1', "", None),
])
def test_slurm_job_state_reads_squeue(tmp_path, monkeypatch, script, stderr, expected):
    fake(tmp_path, "squeue", f'echo "$@" > {tmp_path}/args\n{script}\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert runlock.slurm_job_state("1001") == expected
    assert (tmp_path / "args").read_text().split() == ["-h", "-j", "1001", "-o", "%T"]


def test_slurm_job_state_without_squeue_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert runlock.slurm_job_state("1001") is None


# --- launch/slurm_train.sh -------------------------------------------------------------------------------

SRUN = """echo "srun $*" >> "$FAKE_LOG"
echo "PET_SIGNALS_TO_HANDLE=$PET_SIGNALS_TO_HANDLE" >> "$FAKE_LOG"
got=0
trap 'got=1; echo "srun got USR1" >> "$FAKE_LOG"' USR1
if [ "${FAKE_WARN:-0}" = 1 ]; then  # SLURM's warning reaches the batch shell (srun's parent)
  kill -USR1 "$PPID"
  for i in $(seq 100); do [ "$got" = 1 ] && break; sleep 0.1; done
fi
exit "${FAKE_STATUS:-0}"
"""
SCONTROL = """echo "scontrol $*" >> "$FAKE_LOG"
if [ "$1" = show ]; then echo node-a; seq 100000 | sed 's/^/node-/'; fi  # more than a pipe holds
"""
PYTHON = """echo "python $*" >> "$FAKE_LOG"
exit "${FAKE_CHECK:-0}"
"""


def run_script(tmp_path, **env) -> tuple[int, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("srun", SRUN), ("scontrol", SCONTROL), ("python", PYTHON)):
        fake(bin_dir, name, body)
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    full = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_LOG=str(log), SLURM_JOB_ID="123",
                SLURM_JOB_NODELIST="node-[a-b]", SLURM_NNODES="2", **env)
    done = subprocess.run(["bash", str(ROOT / "launch" / "slurm_train.sh"), "recipes/negclip.yaml", "optim.lr=1e-5"],
                          cwd=tmp_path, env=full, capture_output=True, text=True, timeout=60)
    return done.returncode, log.read_text().splitlines() if log.exists() else []


def test_slurm_script_is_valid_bash_and_asks_for_the_warning_and_requeue():
    assert subprocess.run(["bash", "-n", str(ROOT / "launch" / "slurm_train.sh")]).returncode == 0
    text = (ROOT / "launch" / "slurm_train.sh").read_text()
    assert "#SBATCH --signal=B:USR1@600\n" in text and "#SBATCH --requeue\n" in text


def test_slurm_script_requeues_when_the_trainer_stopped(tmp_path):
    status, calls = run_script(tmp_path, FAKE_STATUS="75")
    assert status == 75
    assert calls[0] == "python -m trainer recipes/negclip.yaml checkpoint.resume=auto optim.lr=1e-5 --check"
    srun = next(c for c in calls if c.startswith("srun "))
    assert "exec accelerate launch" in srun and "--num_machines 2 --num_processes 16" in srun
    assert "--main_process_ip node-a" in srun
    # the trainer's arguments follow the inner shell's command as srun's own (tests/test_slurm_scripts.py)
    assert srun.endswith('trainer/train.py "$@" launch recipes/negclip.yaml checkpoint.resume=auto optim.lr=1e-5')
    assert "PET_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1" in calls
    assert calls[-1] == "scontrol requeue 123"


def test_slurm_script_passes_the_warning_on_and_requeues_after_it(tmp_path):
    """SIGUSR1 reaches the batch shell: srun gets it; the launcher's exit 1 then means 'stopped'."""
    status, calls = run_script(tmp_path, FAKE_WARN="1", FAKE_STATUS="1")
    assert "srun got USR1" in calls
    assert status == 1 and calls[-1] == "scontrol requeue 123"


@pytest.mark.parametrize("env", [{"FAKE_STATUS": "0"}, {"FAKE_STATUS": "1"}, {"FAKE_STATUS": "3"},
                                 {"FAKE_WARN": "1", "FAKE_STATUS": "0"}])
def test_slurm_script_does_not_requeue_a_finished_or_failed_run(tmp_path, env):
    status, calls = run_script(tmp_path, **env)
    assert status == int(env["FAKE_STATUS"])
    assert any(c.startswith("srun ") for c in calls)
    assert not any("requeue" in c for c in calls)


def test_slurm_script_stops_at_a_failed_pre_flight(tmp_path):
    status, calls = run_script(tmp_path, FAKE_CHECK="2", FAKE_STATUS="75")
    assert status == 2 and calls == [
        "python -m trainer recipes/negclip.yaml checkpoint.resume=auto optim.lr=1e-5 --check"]


def test_the_scripts_stop_code_is_the_trainers():
    from compclip.trainer.stopsignals import EXIT_STOPPED
    assert f"stopped_code={EXIT_STOPPED} " in (ROOT / "launch" / "slurm_train.sh").read_text()
