"""spaCy and thinc as the negative rules load them: four changes to their normal behaviour, each
used only on the versions it was checked on (`CHECKED`), with spaCy's plain behaviour elsewhere.

- `import_spacy()`: `import spacy` without torch and without spaCy's command line. Thinc imports
  torch when it can (~1.4 s of a 5,000-caption command) though the CPU pipelines of
  `load_tagger` never use it; and `spacy/__init__.py` imports `spacy.cli` (typer, weasel,
  requests, httpx: ~0.2 s) for `spacy.info` alone. Both are hidden only while spaCy and thinc
  load (`sys.modules["torch"] = None`, a stub `spacy.cli`; thinc then leaves its PyTorch
  wrappers off; `spacy.info` imports the real one when called); a process that has already
  imported torch keeps it, and `import torch` or `import spacy.cli` later works as usual.
  Should a spaCy release need more of its CLI at import, spaCy is imported plainly.
  Fallback: `import spacy`.
- `stop_words(lang)`: a language's stop-word list from its `spacy/lang/<xx>/stop_words.py`
  executed as a plain file: importing the language packages would load their tokenizer
  exceptions (~4 s of a 5,000-caption command). Fallback: `spacy.lang.<xx>.stop_words` imported.
- `load_tagger(model, parser)`: the pipeline with only tokenizer, tok2vec and tagger (and the
  parser when asked), loaded with three changes: (1) its layers multiply through numpy's BLAS
  (`NumpyOps(use_blis=False)`): thinc's default, blis, runs the tok2vec's matrix products ~3x
  slower on an AVX-512 CPU, and the tags come out the same; (2) the tokenizer starts bare
  (`compclip.bare_tokenizer.v1`): loading a package replaces every tokenizer rule with the
  package's own, so building the language's default tokenizer first, as `spacy.load` does
  (~0.18 s), is work thrown away: the same tokens either way; (3) the attribute_ruler is loaded
  but disabled, and its tag -> POS mapping is read into a `PosTable` that the rules apply
  (`datagen.negatives.text.view`): running the ruler makes the parse take ~1.7x the CPU time
  of the tagger-only one (bench/results/pos_table.json). Components never run are
  excluded, not only disabled: their weights are not even read (~0.07 s of start-up).
  Fallback: `spacy.load(model, exclude=...)` with the attribute_ruler running (the Doc then
  carries spaCy's own POS, which `view` reads) and thinc's default ops.

The `PosTable` holds the ruler's single-token patterns on TAG alone or TAG + LOWER; patterns
that need the dependency parse are left out. On a tagger-only pipeline it gives exactly the
ruler's coarse POS: 0 of the 4,345 SugarCrepe captions (50,660 tokens) differ
(tests/test_compat.py). Against the full pipeline, parser included, 288 captions (6.6 %, 296
tokens) get another POS, all from the ruler's parse-dependent patterns (VBZ / VBP "is", "has"
as AUX or VERB; IN as ADP or SCONJ; DT as DET or PRON), which a pipeline without the parser
cannot apply, table or ruler alike. The negclip rule set parses with the full pipeline.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from compclip.compat import in_checked_range

# the versions each change was checked on: [low, high)
CHECKED = {"spacy": ("3.8", "3.9"), "thinc": ("8.3", "8.4")}
BARE_TOKENIZER = "compclip.bare_tokenizer.v1"


def patched() -> bool:
    """Whether the installed spaCy and thinc are in the checked ranges (a warning, once, when not)."""
    return all(in_checked_range(dist, *CHECKED[dist]) for dist in ("spacy", "thinc"))


# --- import ---------------------------------------------------------------------------------------

def import_spacy():
    """`import spacy`, without torch and spaCy's command line where checked (module docstring)."""
    if "spacy" in sys.modules or not patched():
        import spacy
        return spacy
    hidden: dict[str, object] = {"spacy.cli": _stub_module("spacy.cli"),
                                 "spacy.cli.info": _stub_module("spacy.cli.info", info=_spacy_info)}
    if "torch" not in sys.modules:
        hidden["torch"] = None  # `import torch` raises ImportError, which thinc expects
    sys.modules.update(hidden)
    try:
        import spacy
    except (ImportError, AttributeError):  # the stub CLI was not enough: import spaCy plainly
        for name in [n for n in sys.modules if n == "spacy" or n.startswith("spacy.")]:
            if name not in hidden:
                del sys.modules[name]
        for name in ("spacy.cli", "spacy.cli.info"):
            del sys.modules[name]
        import spacy
    finally:
        for name, value in hidden.items():
            if name in sys.modules and sys.modules[name] is value:
                del sys.modules[name]
    return spacy


def _stub_module(name: str, **attrs):
    import types
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _spacy_info(*args, **kwargs):
    """`spacy.info` (spacy.cli.info.info), imported when called."""
    from spacy.cli.info import info
    return info(*args, **kwargs)


# --- stop words -----------------------------------------------------------------------------------

def stop_words(lang: str) -> set[str]:
    """spaCy's stop-word list of a language, from its `stop_words.py` alone where checked."""
    if not patched():
        return set(importlib.import_module(f"spacy.lang.{lang}.stop_words").STOP_WORDS)
    root = Path(importlib.util.find_spec("spacy").submodule_search_locations[0])
    spec = importlib.util.spec_from_file_location(f"_stop_words_{lang}", root / "lang" / lang / "stop_words.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.STOP_WORDS)


# --- the tagger -----------------------------------------------------------------------------------

def _bare_tokenizer():
    """spaCy's tokenizer without rules: loading a package gives it the package's own."""
    from spacy.tokenizer import Tokenizer
    return lambda nlp: Tokenizer(nlp.vocab)


def load_tagger(model: str, parser: bool = False):
    """The spaCy pipeline `model` with tokenizer, tok2vec and tagger (+ parser), and the
    `PosTable` to read coarse POS with (None when spaCy's attribute_ruler sets them itself: the
    fallback). See the module docstring."""
    spacy = import_spacy()
    exclude = ["ner", "lemmatizer", "senter"] + ([] if parser else ["parser"])
    if not patched():
        return spacy.load(model, exclude=exclude), None
    from thinc.api import use_ops
    if BARE_TOKENIZER not in spacy.registry.tokenizers:
        spacy.registry.tokenizers.register(BARE_TOKENIZER, func=_bare_tokenizer)
    with use_ops("numpy", use_blis=False):
        nlp = spacy.load(model, exclude=exclude, disable=["attribute_ruler"],
                         config={"nlp": {"tokenizer": {"@tokenizers": BARE_TOKENIZER}}})
        if nlp.tokenizer.prefix_search is None:  # the package brought no tokenizer of its own
            nlp = spacy.load(model, exclude=exclude, disable=["attribute_ruler"])
    table = PosTable.from_ruler(nlp.get_pipe("attribute_ruler")) if "attribute_ruler" in nlp.component_names else None
    return nlp, table


class PosTable:
    """Coarse POS from fine tags: tag -> POS, and `(tag, word)` -> POS exceptions (e.g. VBZ "is"
    -> AUX), read from a spaCy AttributeRuler's patterns; patterns that need the dependency
    parse are left out."""

    def __init__(self, by_tag: dict[str, str], by_word: dict[tuple[str, str], str]):
        self.by_tag, self.by_word = by_tag, by_word

    @classmethod
    def from_ruler(cls, ruler) -> "PosTable":
        by_tag: dict[str, str] = {}
        by_word: dict[tuple[str, str], str] = {}
        for entry in ruler.patterns:
            pos = entry["attrs"].get("POS")
            pattern = entry["patterns"][0]
            if pos is None or len(pattern) != 1 or not isinstance(pattern[0].get("TAG"), str):
                continue
            token = pattern[0]
            if set(token) == {"TAG"}:
                by_tag[token["TAG"]] = pos
            elif set(token) == {"TAG", "LOWER"}:
                lower = token["LOWER"]
                for word in ([lower] if isinstance(lower, str) else lower.get("IN", [])):
                    by_word[(token["TAG"], word)] = pos
        return cls(by_tag, by_word)

    def pos(self, tag: str, word: str) -> str:
        """The coarse POS of `word` tagged `tag` ("X" for a tag the ruler does not map)."""
        return self.by_word.get((tag, word.lower())) or self.by_tag.get(tag, "X")

