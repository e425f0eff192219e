"""compclip: composition-aware contrastive finetuning of CLIP.

The one import name of the toolkit. Its subpackages are the repository's top-level folders:
`compclip.trainer` (trainer/), `compclip.datagen` (datagen/), `compclip.eval` (eval/) and
`compclip.models` (models/), beside the shared bottom layer in this folder (`compclip.shardset`,
`compclip.cli`, `compclip.errors`, `compclip.fileio`, `compclip.runlock`, `compclip.compat`);
docs/architecture.md draws the layout and what each may import.

Installed from a wheel, `pyproject.toml` maps the folders into this package. Run from a checkout
(this file's parent holds `pyproject.toml` and `trainer/train.py`), the checkout's root joins the
package's search path, so the same names resolve to the checkout's folders whichever copy an
editable install points at.
"""
from pathlib import Path as _Path

_ROOT = _Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "trainer" / "train.py").is_file():
    __path__.append(str(_ROOT))  # noqa: F821  (a package's own search path)
