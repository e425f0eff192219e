"""Every change this project makes to a third-party library's behaviour, one submodule per library.

Each change is used only on the versions it was checked on; outside that range the library's
plain behaviour is used instead, with one warning per library and process
(`in_checked_range`). Each has a test of both paths (tests/test_compat.py; the BLAS one in
tests/test_knn.py).

| change | why | checked on | fallback |
|---|---|---|---|
| `spacy.import_spacy`: spaCy imported with `sys.modules["torch"] = None` and a stub `spacy.cli` while it loads | thinc imports torch (~1.4 s) and spaCy its CLI (~0.2 s) though the CPU tagger uses neither | spaCy >=3.8,<3.9, thinc >=8.3,<8.4 | `import spacy` |
| `spacy.stop_words`: `spacy/lang/<xx>/stop_words.py` executed as a file | importing the language packages loads their tokenizer exceptions (~4 s) | spaCy >=3.8,<3.9 | `spacy.lang.<xx>.stop_words` imported |
| `spacy.load_tagger`: the tagger's layers on numpy's BLAS (`NumpyOps(use_blis=False)`) | blis runs the tok2vec products ~3x slower on AVX-512; same tags | spaCy >=3.8,<3.9, thinc >=8.3,<8.4 | thinc's default ops |
| `spacy.load_tagger`: a bare tokenizer that the package's rules fill | `spacy.load` builds the default tokenizer first, then replaces every rule (~0.18 s) | spaCy >=3.8,<3.9 | `spacy.load`'s tokenizer |
| `spacy.PosTable`: the attribute_ruler disabled, its tag -> POS patterns applied by the rules | the ruler makes the parse take ~1.7x the CPU time of the tagger-only one (bench/results/pos_table.json); same POS (0 of 4,345 SugarCrepe captions differ) | spaCy >=3.8,<3.9 | the attribute_ruler runs (spaCy's own POS) |
| `torch.one_dim_logit_scale`: open_clip's 0-dim `logit_scale` made shape [1] under DeepSpeed, with state-dict hooks (torch's public `register_state_dict_post_hook` / `register_load_state_dict_pre_hook`) that keep saved state dicts 0-dim | DeepSpeed cannot broadcast a 0-dim parameter | torch >=2.5,<2.15, DeepSpeed >=0.16,<0.20 | the parameter left 0-dim (DeepSpeed runs may then fail) |
| `blas` (`compclip/compat/blas.py`): scipy's Cython BLAS `ssyrk` called through ctypes, with `ctypes.pythonapi.PyCapsule_*` argument types set process-wide | scipy's wrapper holds the GIL for the whole product, so the k-NN self-join's threads waited for each other; `ssyrk` does half a square product's work | scipy 1.17 (the range is in that module) | a full product for the diagonal blocks |

Not a change to any library: `trainer/train.py` puts the repository root first on `sys.path`
when it is run as a script (`accelerate launch trainer/train.py RECIPE`), so that `trainer/*.py`
do not shadow top-level modules and the packages import from the checkout (see its comment).
"""
from __future__ import annotations

import warnings

_WARNED: set[str] = set()
_CHECKED: dict[tuple[str, str, str], bool] = {}  # (dist, low, high) -> in range (asked once a process)


class UncheckedVersion(UserWarning):
    """A library's installed version is outside the range a change was checked on."""


def installed_version(dist: str):
    """The installed version of distribution `dist` (a `packaging` Version), None if absent."""
    from importlib import metadata

    from packaging.version import Version
    try:
        return Version(metadata.version(dist))
    except metadata.PackageNotFoundError:
        return None


def in_checked_range(dist: str, low: str, high: str) -> bool:
    """Whether `dist` is installed at a version in [low, high); when it is not, warn once per
    process (`UncheckedVersion`) that its plain behaviour is used instead."""
    key = (dist, low, high)
    if key in _CHECKED:
        return _CHECKED[key]
    from packaging.version import Version
    version = installed_version(dist)
    ok = _CHECKED[key] = version is not None and Version(low) <= Version(version.base_version) < Version(high)
    if not ok and dist not in _WARNED:
        _WARNED.add(dist)
        warnings.warn(f"{dist} {version or '(not installed)'} is outside the range compclip's changes to it "
                      f"were checked on (>={low},<{high}); using its plain behaviour (compclip.compat)",
                      UncheckedVersion, stacklevel=3)
    return ok
