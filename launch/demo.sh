#!/usr/bin/env bash
# The offline demo: synthetic world -> train control / NegCLIP-style / TROHN-Img-style -> compare.
# Not built yet: it needs the world, trainer and eval pieces and arrives with the demo issue.
set -euo pipefail
echo "launch/demo.sh: the offline demo is not built yet (it arrives with the recipes/demo issue)." >&2
echo "Run the tests instead: .venv/bin/python -m pytest -q" >&2
exit 1
