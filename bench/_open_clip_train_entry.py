"""Run open_clip's own trainer (`open_clip_train.main`) with this project's tiny architectures.

    python bench/_open_clip_train_entry.py --model tiny-vit-64 --train-data x.csv ...

Importing `models.registry` adds `models/configs/*.json` to open_clip's model registry; the
arguments are passed to `open_clip_train.main.main` unchanged. Used by bench_vs_open_clip.py.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path.pop(0)
sys.path.insert(0, str(ROOT))

import compclip.models.registry  # noqa: E402,F401  (registers tiny-vit-64 & co. into open_clip)
from open_clip_train.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
