#!/usr/bin/env bash
# Multi-node training under SLURM: one accelerate launcher per node, 8 GPUs each.
#   bash launch/slurm_train.sh [--sbatch-option=value ...] recipes/trohn_img.yaml [key=value ...]
#   (outside a job: creates logs/ and submits itself, e.g. --nodes=4; options in --opt=value form)
#   mkdir -p logs && sbatch --nodes 4 launch/slurm_train.sh recipes/trohn_img.yaml [key=value ...]
# SLURM opens --output (logs/...) before the script runs and does not create folders: a job
# submitted with plain sbatch and no logs/ in the submission folder fails without a log.
# Every key=value reaches the pre-flight and each node's trainer as one argument, spaces included
# ('eval.benchmarks=[visla, aro]').
#SBATCH --job-name=compclip-train
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%j.out
#SBATCH --requeue
#SBATCH --signal=B:USR1@600
#
# The job resumes by default (checkpoint.resume=auto; a later key=value overrides it), so a
# requeued or resubmitted job continues from the run's latest checkpoint; the pre-flight runs
# once first, so a bad recipe or missing data fails the job with the trainer's exit code (2).
#
# Before the time limit (--signal=B:USR1@600): SLURM sends SIGUSR1 to this batch shell alone
# ("B:"), 600 s before the job's end. The trap below passes it to srun, which forwards it to its
# job step, and each node's accelerate launcher passes it on to its trainer processes
# (PET_SIGNALS_TO_HANDLE adds SIGUSR1 to the signals torch's launcher forwards; without it a
# SIGUSR1 reaching the launcher would end it and its processes with it). The trainer writes a
# checkpoint at the next step boundary on every rank and exits 75; a launcher whose processes
# stop so exits 1 (it does not pass their exit code on), and waits PET_SHUTDOWN_TIMEOUT seconds
# (default 600) for them before it kills them. The signal goes to the shell rather than straight to
# the job step (--signal=USR1@600) so that this script knows it came: it then asks SLURM to
# requeue the job (scontrol requeue, allowed by --requeue) when the step ends with any status but
# 0 (75, or 1 from the launcher); a step ending 0 finished training and is not requeued, nor is
# one that fails without the warning. The requeued job keeps its job id and takes over the run
# folder's lock of its earlier attempt.
#
# A preempted, cancelled or timed-out job gets SIGTERM in every process: the trainer writes its
# checkpoint and exits 75 the same way if SLURM's grace time (KillWait, GraceTime) lets it; this
# shell does not trap SIGTERM, ends there and requeues nothing (SLURM requeues preempted jobs
# itself where PreemptMode=REQUEUE). A resubmitted job (a new job id) takes over the lock of this
# job once SLURM no longer lists it as running (squeue).
set -euo pipefail
mkdir -p logs
if [ -z "${SLURM_JOB_ID:-}" ]; then  # run by hand: submit this script, sbatch options first
  opts=()
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do opts+=("$1"); shift; done
  exec sbatch ${opts[@]+"${opts[@]}"} "$0" "$@"
fi
recipe=${1:?usage: sbatch launch/slurm_train.sh RECIPE [key=value ...]}; shift
gpus_per_node=${GPUS_PER_NODE:-8}
stopped_code=75  # trainer/stopsignals.py EXIT_STOPPED
python -m trainer "$recipe" checkpoint.resume=auto "$@" --check
# the first node (sed reads every line: `head -n 1` could end scontrol with SIGPIPE, failing pipefail)
main_ip=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
export OMP_NUM_THREADS=8
export PET_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1
export PET_SHUTDOWN_TIMEOUT=${PET_SHUTDOWN_TIMEOUT:-600}

warned=0 interrupted=0 step=""
on_warning() {  # SLURM's SIGUSR1: pass it to srun, which forwards it to the job step's tasks
  warned=1 interrupted=1
  echo "SIGUSR1 from SLURM: asking the trainer to checkpoint and stop" >&2
  if [ -n "$step" ]; then kill -USR1 "$step" 2>/dev/null || true; fi
}
trap on_warning USR1

# the node's rank is read on the node; the trainer's arguments travel as srun's own arguments
# ("$@" of the inner shell), never re-split
config=$(printf %q "${ACCELERATE_CONFIG:-launch/multinode_template.yaml}")
srun --kill-on-bad-exit=1 bash -c "exec accelerate launch --config_file $config \
  --num_machines $SLURM_NNODES --num_processes $((SLURM_NNODES * gpus_per_node)) \
  --machine_rank \$SLURM_NODEID --main_process_ip $main_ip --main_process_port 29500 \
  trainer/train.py \"\$@\"" launch "$recipe" checkpoint.resume=auto "$@" &
step=$!
while :; do  # `wait` returns early when the trap runs: wait again until srun itself ends
  interrupted=0 status=0
  wait "$step" || status=$?
  [ "$interrupted" = 1 ] || break
done

if [ "$status" -eq "$stopped_code" ] || { [ "$warned" = 1 ] && [ "$status" -ne 0 ]; }; then
  echo "training stopped before the job's end (exit $status); requeueing job $SLURM_JOB_ID to continue" >&2
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
# 2-process DDP on CPU (gloo), as ../shared/ENVIRONMENT.md found working:
#   accelerate launch --config_file launch/accelerate_cpu2.yaml trainer/train.py RECIPE
# (train.py builds Accelerator(cpu=True) itself when no GPU is present.)
