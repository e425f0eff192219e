#!/usr/bin/env bash
# The offline demo (the README's main command): synthetic worlds -> base model -> control,
# NegCLIP-, TROHN-Text-, TROHN-Img-style and left-right pairs finetuning -> comparison table and
# plots in runs/demo/.
# Options go to launch/demo.py (--seeds 0 1 2, --out DIR, ...); see docs/demo.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PYTHON" launch/demo.py "$@"
