#!/usr/bin/env bash
# Multi-node training under SLURM: one accelerate launcher per node, 8 GPUs each.
#   sbatch --nodes 4 launch/slurm_train.sh recipes/trohn_img.yaml [key=value ...]
#SBATCH --job-name=compclip-train
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%j.out
set -euo pipefail
# The job resumes by default (checkpoint.resume=auto; a later key=value overrides it), so a
# requeued or resubmitted job continues from the run's latest checkpoint; the pre-flight runs
# once first, so a bad recipe or missing data fails the job with the trainer's exit code (2).
recipe=${1:?usage: sbatch launch/slurm_train.sh RECIPE [key=value ...]}; shift
gpus_per_node=${GPUS_PER_NODE:-8}
python -m trainer "$recipe" checkpoint.resume=auto "$@" --check
main_ip=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export OMP_NUM_THREADS=8
srun --kill-on-bad-exit=1 bash -c "accelerate launch \
  --config_file ${ACCELERATE_CONFIG:-launch/multinode_template.yaml} \
  --num_machines $SLURM_NNODES --num_processes $((SLURM_NNODES * gpus_per_node)) \
  --machine_rank \$SLURM_NODEID --main_process_ip $main_ip --main_process_port 29500 \
  trainer/train.py $recipe checkpoint.resume=auto $*"
