#!/usr/bin/env bash
# The GPU checklist (docs/bench.md, "GPU") on a machine with torch + CUDA but no package registry,
# run from the repository root with the wheel folder and the captions beside it:
#
#   launch/gpu_check.sh check  OUTDIR   # package check, tests/gpu, a short bench_gpu.py smoke run
#   launch/gpu_check.sh bench  OUTDIR [bench_gpu.py args]   # bench_gpu.py, bench_eval.py on CUDA, eval tests
#
# Expects: .whl/ (launch/wheelhouse.sh), .gpucarry/sugarcrepe/*.json (COCO captions for the bench)
# and optionally .gpucarry/commit (the commit the tree was copied from, for the results' meta).
# Logs and result files are copied to OUTDIR. Python: $PYTHON, else python3.
set -uo pipefail

MODE="${1:?usage: launch/gpu_check.sh check|bench OUTDIR}"
OUTDIR="${2:?usage: launch/gpu_check.sh check|bench OUTDIR}"
PY="${PYTHON:-python3}"
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export COMPCLIP_COCO_CAPTIONS="$PWD/.gpucarry/sugarcrepe"
[ -f .gpucarry/commit ] && export COMPCLIP_GIT_COMMIT="$(cat .gpucarry/commit)"

"$PY" -m pip show pydantic open_clip_torch webdataset ftfy braceexpand 2>&1 | grep -E "^(Name|Version)|not found" \
    > "$OUTDIR/pip_show_before.txt"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_check: wheel install failed" >&2; exit 1; }
export PYTHONPATH=/tmp/site
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$PY" -c "import torch, open_clip, webdataset, pydantic; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'device', torch.cuda.get_device_name()); print('open_clip', open_clip.__version__, 'pydantic', pydantic.VERSION)"
    nproc
} 2>&1 | tee "$OUTDIR/machine.txt"

status=0
case "$MODE" in
    check)
        timeout 300 "$PY" -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tee "$OUTDIR/tests_gpu.txt" || status=1
        timeout 240 "$PY" bench/bench_gpu.py --quick --out "$OUTDIR/gpu_quick.json" 2>&1 | tee "$OUTDIR/bench_quick.txt" \
            || status=1
        ;;
    bench)
        timeout 390 "$PY" bench/bench_gpu.py "${@:3}" 2>&1 | tee "$OUTDIR/bench_gpu.txt" || status=1
        cp bench/results/gpu.json "$OUTDIR/" 2>/dev/null
        # ARO and left-right need spaCy, which a bare GPU image lacks
        timeout 80 "$PY" bench/bench_eval.py --device cuda --arch ViT-B-32 --batch-size 256 --reps 2 \
            --benchmarks bivlc retrieval sugarcrepe sugarcrepe_pp visla visla_lexical zeroshot \
            --out bench/results/gpu_eval.json 2>&1 | tee "$OUTDIR/bench_eval.txt" || status=1
        cp bench/results/gpu_eval.json "$OUTDIR/" 2>/dev/null
        timeout 90 "$PY" -m pytest -q -p no:cacheprovider tests/gpu/test_eval_cuda.py 2>&1 \
            | tee "$OUTDIR/tests_gpu_eval.txt" || status=1
        ;;
    *) echo "gpu_check: unknown mode $MODE (check or bench)" >&2; exit 2 ;;
esac
exit $status
