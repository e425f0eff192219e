#!/usr/bin/env bash
# Datagen as a SLURM job array: task i handles input part i into its own shard set, so parts
# spread over many machines; every step resumes from its last complete shard if re-run.
# Split the captions into parts first (one CSV/TSV or JSON per part, each with its header). Mine
# one replacement vocabulary for all parts (a run writes it to OUT/vocab.json), then one task
# per part:
#   python -m datagen negatives generate --src all_captions.tsv --out vocab_run --limit 20000
#   VOCAB=vocab_run/vocab.json bash launch/slurm_datagen_array.sh --array=0-63 parts/ out/
# Run by hand (outside a job) the script creates logs/ and submits itself, sbatch options (in
# --opt=value form) first; with plain sbatch, logs/ must exist first (mkdir -p logs): SLURM opens
# --output before the script runs and does not create folders. Each task runs one worker process
# per CPU it was given (SLURM_CPUS_PER_TASK, from --cpus-per-task; 1 when unset).
#SBATCH --job-name=compclip-datagen
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --output=logs/%x-%A_%a.out
set -euo pipefail
mkdir -p logs
if [ -z "${SLURM_JOB_ID:-}" ]; then  # run by hand: submit this script, sbatch options first
  opts=()
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do opts+=("$1"); shift; done
  exec sbatch ${opts[@]+"${opts[@]}"} "$0" "$@"
fi
parts=${1:?usage: sbatch --array=0-N launch/slurm_datagen_array.sh PARTS_DIR OUT_DIR}
out=${2:?usage: sbatch --array=0-N launch/slurm_datagen_array.sh PARTS_DIR OUT_DIR}
part=$(ls "$parts" | sort | sed -n "$((SLURM_ARRAY_TASK_ID + 1))p")
name=$(printf 'part-%05d' "$SLURM_ARRAY_TASK_ID")
export OMP_NUM_THREADS=1
python -m datagen negatives generate --src "$parts/$part" --out "$out/$name" --seed "${SEED:-0}" \
  --workers "${SLURM_CPUS_PER_TASK:-1}" \
  --vocab "${VOCAB:?mine one vocabulary first and pass VOCAB=path so every part uses the same}"
