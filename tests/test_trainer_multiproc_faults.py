"""Preemption and stalled ranks as users meet them, in subprocesses (1 process, and 2-process DDP
on CPU through `accelerate launch`, flags from ../shared/ENVIRONMENT.md):

- SIGTERM / SIGUSR1 stop the run at a step boundary with a checkpoint on every rank (exit 75),
  whether the signal reaches the process group of a single process, one rank only
  (tests/_signal_rank.py), or the launcher alone, configured as launch/slurm_train.sh configures
  it (PET_SIGNALS_TO_HANDLE with SIGUSR1); the rerun ends with the weights of an uninterrupted
  run, bit for bit;
- a rank that stops (SIGSTOP) turns into one error line on the other rank once
  `distributed.timeout_minutes` has passed, instead of a hang.
"""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

from tests.test_trainer_multiproc import (ACCELERATE, CPU2, PAUSED, ROOT, env, final_weights, kill_tree, recipe,
                                          shards)  # noqa: F401 (shards: a fixture)

pytestmark = pytest.mark.slow
DDP = [ACCELERATE, "launch", "--multi_gpu", *CPU2]
SINGLE = [sys.executable]


def train(launch, script, rec, extra_env=None, timeout=300):
    return subprocess.run(launch + [script, rec], cwd=ROOT, env=dict(env(), **(extra_env or {})),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, shards):
    """Final weights of uninterrupted runs: {mode: state_dict}, each run once per module."""
    done = {}

    def weights(mode):
        if mode not in done:
            folder = tmp_path_factory.mktemp(f"full-{mode}")
            launch, spe = (SINGLE, 16) if mode == "single" else (DDP, 32)
            out = train(launch, "trainer/train.py", recipe(folder, shards, "full", spe=spe, workers=2))
            assert out.returncode == 0, out.stderr[-3000:]
            done[mode] = final_weights(folder / "full")
        return done[mode]
    return weights


def kill_leftovers(marker) -> None:
    """SIGKILL every process whose command line holds `marker` (the test's own recipe path): ranks
    and their loader workers, stopped or not, whatever became of their launcher."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid != os.getpid() and any(str(marker) in part for part in proc.info["cmdline"] or []):
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass


def wait_for(proc, log, text, timeout=300):
    deadline = time.time() + timeout
    while text not in log.read_text():
        assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)


def stopped_then_resumed(tmp_path, launch, rec, proc, log):
    """The stopped run's checkpoint is step 7 (4 steps an epoch, checkpoints at 4 and 5 before);
    its stop line names it; the rerun resumes from it and finishes."""
    try:
        proc.wait(timeout=300)
    finally:
        kill_leftovers(rec)
    text = log.read_text()
    ckpts = tmp_path / "stopped" / "mp" / "checkpoints"
    assert "stopped by SIG" in text and f"at step 7 (epoch 1); checkpoint {ckpts / 'step-0000007.pt'}; " \
                                        f"rerun the same command to continue" in text, text[-3000:]
    assert (ckpts / "latest").read_text().strip() == "step-0000007.pt"
    assert not (tmp_path / "stopped" / "mp" / "run.lock").exists()
    resumed = train(launch, "trainer/train.py", rec)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "(step 7, epoch 1)" in resumed.stderr
    return text


def assert_same_weights(want, got):
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), key


def test_sigterm_to_a_process_group_stops_with_a_checkpoint_and_resumes_bit_identically(tmp_path, shards,
                                                                                        uninterrupted):
    """One process with 2 loader workers, SIGTERM to its whole process group (the workers too) while
    it waits after step 7: exit 75 (`python -m trainer` passes its code on)."""
    rec = recipe(tmp_path, shards, "stopped", spe=16, workers=2)
    log = tmp_path / "stopped.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(SINGLE + [PAUSED, "7", rec], cwd=ROOT, env=env(),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(proc, log, "paused at step 7")
    os.killpg(proc.pid, signal.SIGTERM)
    stopped_then_resumed(tmp_path, SINGLE, rec, proc, log)
    assert proc.returncode == 75
    assert_same_weights(uninterrupted("single"), final_weights(tmp_path / "stopped"))


def test_sigterm_reaching_one_rank_stops_both_and_resumes_bit_identically(tmp_path, shards, uninterrupted):
    """2-process DDP: rank 1 alone gets SIGTERM after step 7; the ranks agree through the per-step
    all-reduce and both take part in the checkpoint of step 7 (rank 0 prints the line)."""
    rec = recipe(tmp_path, shards, "stopped", spe=32, workers=2)
    log = tmp_path / "stopped.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(DDP + ["tests/_signal_rank.py", "7", rec], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env=dict(env(), **{"COMPCLIP_TEST_SIGNAL": "SIGTERM",
                                                   "COMPCLIP_TEST_SIGNAL_RANK": "1"}), start_new_session=True)
    text = stopped_then_resumed(tmp_path, DDP, rec, proc, log)
    assert "rank 1 sends itself SIGTERM after step 7" in text and "rank 0 sends" not in text
    assert "exitcode  : 75" in text  # both ranks exited 75; accelerate launch itself exits 1
    assert proc.returncode == 1
    assert_same_weights(uninterrupted("ddp"), final_weights(tmp_path / "stopped"))


def test_sigusr1_to_the_launcher_reaches_its_ranks_as_slurm_train_sh_sets_it_up(tmp_path, shards, uninterrupted):
    """SIGUSR1 to `accelerate launch` alone (srun forwards SLURM's warning to the task's launcher),
    with PET_SIGNALS_TO_HANDLE as launch/slurm_train.sh exports it: the launcher passes it to both
    ranks, which stop after the step they are at (7: both wait there) with a checkpoint."""
    rec = recipe(tmp_path, shards, "stopped", spe=32, workers=2)
    log = tmp_path / "stopped.log"
    slurm_env = {"PET_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
                 "PET_SHUTDOWN_TIMEOUT": "300"}
    with open(log, "w") as out:
        proc = subprocess.Popen(DDP + [PAUSED, "7", rec], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env=dict(env(), **slurm_env), start_new_session=True)
    deadline = time.time() + 300
    while log.read_text().count("paused at step 7") < 2:
        assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGUSR1)
    text = stopped_then_resumed(tmp_path, DDP, rec, proc, log)
    assert "stopped by SIGUSR1" in text
    assert proc.returncode == 1  # the launcher re-raises the signal's exception once its ranks ended
    assert_same_weights(uninterrupted("ddp"), final_weights(tmp_path / "stopped"))


def test_a_stalled_rank_is_one_error_line_on_the_other_after_the_timeout(tmp_path, shards):
    """Rank 1 stops itself (SIGSTOP) after step 3; with distributed.timeout_minutes=0.1 rank 0's next
    collective gives up after 6 s: one line naming its rank, exit 3 (the launcher then ends the
    stopped rank and exits 1). Before the key existed rank 0 waited for gloo's default 30 minutes."""
    rec = recipe(tmp_path, shards, "stall", spe=32, workers=2)
    proc = subprocess.Popen(DDP + ["tests/_signal_rank.py", "3", rec, "distributed.timeout_minutes=0.1"], cwd=ROOT,
                            env=dict(env(), **{"COMPCLIP_TEST_SIGNAL": "SIGSTOP",
                                               "COMPCLIP_TEST_SIGNAL_RANK": "1", "PET_SHUTDOWN_TIMEOUT": "5"}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        pytest.fail("the run hung: rank 0 kept waiting for the stalled rank")
    finally:
        kill_leftovers(rec)
    assert "rank 1 sends itself SIGSTOP after step 3" in stderr
    errors = [l for l in stderr.splitlines() if l.startswith("error: ")]
    assert errors == ["error: rank 0: a collective timed out after 0.1 min (another rank stalled or died); rerun "
                      "with checkpoint.resume=auto to continue from the last checkpoint; if a rank legitimately "
                      "works alone longer (an evaluation on rank 0), raise distributed.timeout_minutes"], stderr[-3000:]
    assert "exitcode  : 3" in stderr and proc.returncode == 1
