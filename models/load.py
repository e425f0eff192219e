"""Build any CLIP model the toolkit uses, with the QuickGELU lineage guard.

`load_model(arch, pretrained, activation, lineage)` builds an open_clip architecture (ours from
`models.registry` included) with weights from an open_clip pretrained tag, a checkpoint file
(open_clip's or ours with its metadata sidecar), or none. OpenAI-lineage weights were trained
with QuickGELU; open_clip >= 2.29 no longer forces it, so building them with GELU silently gives
wrong numbers. Here the weights' activation is worked out first (the tag's pretrained config, the
checkpoint's sidecar, or `lineage="openai"`), the model is built with it, and any disagreement
with what was asked for or what was built raises `ActivationMismatch`.

A checkpoint may be given in any form `models.checkpoint.resolve_checkpoint` reads (a file, a
pointer file, a run or checkpoints folder). Its sidecar names its architecture: `arch` may then be
left out, and a different one is refused (`ArchitectureMismatch`) rather than built with resized
position embeddings, which would score another model. Bare files are checked too: weights whose
shapes differ from the architecture's are refused, not resized. A file that cannot be read is a
`CorruptCheckpoint` naming it. `resolve_model` runs these checks without building anything, so a
command can validate every model it was given before loading the first. `tag_weights_problem`
says whether an open_clip tag's weights can be had (in the local cache, or the hub / URL reachable
and not offline) before anything tries to download them.

`arch="hf-hub:ORG/NAME"` is a Hugging Face hub model in open_clip's form (`open_clip_config.json`
and `open_clip_model.safetensors` or `open_clip_pytorch_model.bin`, read through the Hugging Face
cache, offline when HF_HUB_OFFLINE=1): its config's `quick_gelu` says which activation its weights
need. With a checkpoint as `pretrained` (a run trained from it names that architecture), the
hub's config builds the model and the checkpoint's weights replace the hub's.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import zipfile
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal, Optional

import open_clip
import torch
from torch import nn

from compclip.models import registry  # noqa: F401  (registers the tiny architectures)
from compclip.cli import InputError
from compclip import lognoise as noise
from compclip.models.checkpoint import WEIGHT_SUFFIXES, CheckpointError, read_meta, resolve_checkpoint, sidecar_path
from compclip.models.text_length import enable_text_trimming

log = logging.getLogger(__name__)

Activation = Literal["gelu", "quickgelu"]


class ActivationMismatch(InputError, ValueError):
    """The weights' activation differs from the one asked for or built."""


class ArchitectureMismatch(InputError, ValueError):
    """The architecture asked for is not the one the checkpoint was trained as."""


class UnknownArchitecture(InputError, ValueError):
    """No open_clip architecture (ours included) has that name."""


class CorruptCheckpoint(CheckpointError):
    """The checkpoint file is there but cannot be read as weights."""


@dataclass(frozen=True)
class ModelInfo:
    arch: str
    pretrained: Optional[str]
    activation: str  # what was built: "gelu", "quickgelu" or "n/a" (towers without either)
    lineage: str  # "openai", "other", "unknown" (a bare file) or "none" (random init)
    weights_activation: Optional[str]  # what the weights were trained with, when known

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadedModel:
    model: nn.Module
    preprocess: Callable  # eval transform (PIL -> tensor)
    preprocess_train: Callable
    tokenizer: Callable  # list[str] -> LongTensor [N, context_length]
    info: ModelInfo
    text_length: str = "full context"  # "per batch" when `models.text_length` trims the context


def built_activation(model: nn.Module) -> str:
    """The MLP activation a model was built with, read off its modules."""
    kinds = {type(m) for m in model.modules()}
    if open_clip.transformer.QuickGELU in kinds:
        return "quickgelu"
    if nn.GELU in kinds:
        return "gelu"
    return "n/a"


def _weights_origin(arch: str, pretrained: Optional[str], lineage: str) -> tuple[str, Optional[str]]:
    """(lineage, activation the weights were trained with or None if unknown)."""
    if is_hf_hub(arch) and not pretrained:
        quick = bool(_hf_hub_config(arch).get("quick_gelu", False))
        return ("openai" if lineage == "openai" else "other"), "quickgelu" if quick else "gelu"
    if not pretrained:
        return "none", None
    if os.path.isfile(pretrained):
        meta = read_meta(pretrained)
        if lineage == "openai" or (meta and meta.lineage == "openai"):
            return "openai", "quickgelu"
        if meta is not None:
            return meta.lineage, meta.activation if meta.activation != "n/a" else None
        return ("other" if lineage == "other" else "unknown"), None
    tag_cfg = open_clip.get_pretrained_cfg(arch, pretrained)
    if not tag_cfg:
        tags = open_clip.list_pretrained_tags_by_model(arch)
        raise FileNotFoundError(
            f"pretrained '{pretrained}' is neither a file nor an open_clip tag of '{arch}' "
            f"(tags: {', '.join(tags) or 'none'})")
    if pretrained == "openai" or lineage == "openai":
        return "openai", "quickgelu"
    return "other", "quickgelu" if tag_cfg.get("quick_gelu", False) else "gelu"


def load_model(
    arch: Optional[str] = None,
    pretrained: Optional[str] = None,
    activation: Literal["auto", "gelu", "quickgelu"] = "auto",
    lineage: Literal["auto", "openai", "other"] = "auto",
    device: str | torch.device = "cpu",
    precision: str = "fp32",
    cache_dir: Optional[str] = None,
    trim_text: bool = True,
) -> LoadedModel:
    """Build a model. `pretrained`: an open_clip tag, a checkpoint (a file, a pointer file `best` /
    `latest`, a run's `checkpoints/` folder or the run folder: `resolve_checkpoint`), or None for
    random weights; `arch` may be omitted for a compclip checkpoint (its sidecar names it).
    `trim_text`: encode texts at the batch's longest caption where that is exact
    (`models.text_length`); `LoadedModel.text_length` says what was done and why."""
    arch, pretrained = resolve_model(arch, pretrained)
    state = _read_state(pretrained) if pretrained and os.path.isfile(pretrained) else None

    origin, weights_act = _weights_origin(arch, pretrained, lineage)
    if activation != "auto" and weights_act is not None and activation != weights_act:
        raise ActivationMismatch(
            f"{arch} with weights '{pretrained}' ({origin} lineage) was trained with {weights_act}, "
            f"but model.activation={activation} was asked for; use activation=auto or {weights_act}")
    want = weights_act if activation == "auto" else activation

    arch_quick = bool((_hf_hub_config(arch) if is_hf_hub(arch) else open_clip.get_model_config(arch))
                      .get("quick_gelu", False))
    kwargs: dict[str, Any] = {}
    if want == "quickgelu" and not arch_quick:
        kwargs["force_quick_gelu"] = True
    elif want == "gelu" and arch_quick:
        kwargs["quick_gelu"] = False
    if origin == "unknown":
        log.warning("%s: no metadata says which activation these weights were trained with; "
                    "building %s as configured. Set model.lineage=openai for OpenAI-derived weights.",
                    pretrained, arch)

    hub_file = is_hf_hub(arch) and bool(pretrained) and os.path.isfile(pretrained)  # open_clip ignores `pretrained` for hf-hub names
    quiet = noise.random_weights_asked() if pretrained is None else contextlib.nullcontext()
    try:
        with quiet:  # random weights asked for: open_clip's "No pretrained weights loaded" only repeats it
            model, preprocess_train, preprocess = open_clip.create_model_and_transforms(
                arch, pretrained=None if hub_file else pretrained, load_weights=not hub_file, device=device,
                precision=precision, cache_dir=cache_dir, **kwargs)
        if hub_file:
            open_clip.load_checkpoint(model, pretrained)
    except RuntimeError as err:
        if state is None or "loading state_dict" not in str(err):
            raise
        raise ArchitectureMismatch(f"{pretrained}: its weights do not fit '{arch}' "
                                   f"({_first_difference(err)}); give the architecture it was trained as") from None
    if state is not None:
        _refuse_resized(pretrained, arch, state, model)
    built = built_activation(model)
    if weights_act is not None and built not in (weights_act, "n/a"):
        raise ActivationMismatch(
            f"{arch} was built with {built} but weights '{pretrained}' need {weights_act}")
    info = ModelInfo(arch=arch, pretrained=pretrained, activation=built, lineage=origin,
                     weights_activation=weights_act)
    length = "full context (trim_text=False)"
    if trim_text:
        reason = enable_text_trimming(model)
        length = "per batch" if reason is None else f"full context ({reason})"
    return LoadedModel(model=model, preprocess=preprocess, preprocess_train=preprocess_train,
                       tokenizer=open_clip.get_tokenizer(arch), info=info, text_length=length)


def _looks_like_path(pretrained: str) -> bool:
    return (os.path.exists(pretrained) or os.sep in pretrained or "/" in pretrained
            or pretrained.endswith(WEIGHT_SUFFIXES) or pretrained in ("best", "latest")) \
        and not pretrained.startswith("hf-hub:")


def resolve_model(arch: Optional[str], pretrained: Optional[str]) -> tuple[str, Optional[str]]:
    """(architecture, weights) as `load_model` will build them, checked without building anything:
    a checkpoint path resolved to its file (`resolve_checkpoint`), the architecture taken from
    its sidecar (a different one given is an `ArchitectureMismatch`), the architecture known
    (`UnknownArchitecture`), a tag one open_clip has for it, a file that is readable
    (`CorruptCheckpoint`). Every error is one line naming the path or name and the fix."""
    if pretrained and _looks_like_path(pretrained):
        path = resolve_checkpoint(pretrained)
        pretrained = str(path)
        meta = read_meta(path)
        if meta is not None and arch is not None and arch != meta.arch:
            raise ArchitectureMismatch(
                f"{path}: the checkpoint is a '{meta.arch}' (its sidecar {sidecar_path(path).name} says so), "
                f"not '{arch}'; leave the architecture out (it is read from the checkpoint) or give '{meta.arch}'")
        if arch is None:
            if meta is None:
                raise InputError(f"{path}: no architecture given and the checkpoint has no sidecar "
                                 f"({sidecar_path(path).name}) naming one; give the architecture it was trained as")
            arch = meta.arch
        _check_readable(path)
    elif arch is None:
        raise InputError(f"no architecture given for weights '{pretrained or 'none'}'; give an open_clip "
                         "architecture (only a compclip checkpoint names its own)")
    if is_hf_hub(arch):
        if pretrained and not os.path.isfile(pretrained):
            raise InputError(f"{arch} takes its weights from the hub: pretrained '{pretrained}' must be a "
                             "checkpoint file or left out")
        _hf_hub_config(arch)  # one line naming the repo when its config cannot be had
    elif arch not in open_clip.list_models():
        ours = ", ".join(registry.TINY_ARCHS)
        close = difflib.get_close_matches(arch, open_clip.list_models(), n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UnknownArchitecture(f"unknown architecture '{arch}'; {hint}ours: {ours}; "
                                  "the rest: python -c 'import open_clip; print(open_clip.list_models())'")
    if pretrained and not os.path.isfile(pretrained):
        _weights_origin(arch, pretrained, "auto")  # an unknown tag fails here, listing the known ones
    return arch, pretrained


def is_hf_hub(arch: Optional[str]) -> bool:
    return bool(arch) and arch.startswith("hf-hub:")


def _hf_hub_config(arch: str) -> dict:
    """The `model_cfg` of an `hf-hub:ORG/NAME` model's `open_clip_config.json`, through open_clip's
    download (the Hugging Face cache; offline with HF_HUB_OFFLINE=1); `InputError` naming the repo
    when it cannot be had or has no `model_cfg`."""
    from open_clip.pretrained import download_pretrained_from_hf
    repo = arch[len("hf-hub:"):]
    try:
        path = download_pretrained_from_hf(repo, filename="open_clip_config.json")
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (FileNotFoundError, OSError, ValueError) as err:
        first = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise InputError(f"{arch}: its open_clip_config.json cannot be had from the Hugging Face cache or hub "
                         f"({first})") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_cfg"), dict):
        raise InputError(f"{arch}: open_clip_config.json has no 'model_cfg' (not an open_clip model)")
    return cfg["model_cfg"]


def _hub_names(filename: str) -> list[str]:
    """The files open_clip tries for a hub entry, in its order (a safetensors alternative first)."""
    try:
        from open_clip.pretrained import _get_safe_alternatives
    except ImportError:
        return [filename]
    return [*_get_safe_alternatives(filename), filename]


def _answers(check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception:  # noqa: BLE001 -- any network or hub error: not reachable from here
        return False


def _hub_problem(hub: str, offline: bool) -> Optional[str]:
    """A tag's `hf_hub` file: in the local Hugging Face cache (`try_to_load_from_cache`, where
    open_clip's `hf_hub_download` looks), or on the hub when not offline; else why not."""
    import huggingface_hub
    from open_clip.constants import HF_WEIGHTS_NAME
    repo, filename = os.path.split(hub)
    names = _hub_names(filename or HF_WEIGHTS_NAME)
    if any(isinstance(huggingface_hub.try_to_load_from_cache(repo, name), str) for name in names):
        return None
    if not offline and _answers(lambda: any(huggingface_hub.file_exists(repo, name) for name in names)):
        return None
    return f"{repo} ({filename or HF_WEIGHTS_NAME}) is not in the local Hugging Face cache"


def _url_problem(url: str, offline: bool) -> Optional[str]:
    """A tag's `url` file: where open_clip's `download_pretrained_from_url` keeps it
    (~/.cache/clip), or answering when not offline; else why not."""
    import urllib.request
    target = os.path.join(os.path.expanduser("~/.cache/clip"), os.path.basename(url))
    if os.path.isfile(target):
        return None
    head = urllib.request.Request(url, method="HEAD")
    if not offline and _answers(lambda: urllib.request.urlopen(head, timeout=10).status < 400):
        return None
    return f"{target} (from {url}) is not downloaded"


def tag_weights_problem(arch: str, tag: str) -> Optional[str]:
    """Why the weights of open_clip tag `tag` of `arch` cannot be had here, or None. open_clip
    fetches a tag from the Hugging Face hub (its `hf_hub` entry) when huggingface_hub is installed,
    else from its `url` into ~/.cache/clip; the weights are available when that file is already in
    its cache, or when the hub / URL answers and huggingface_hub is not in offline mode
    (HF_HUB_OFFLINE=1, where nothing is fetched). Unknown tags are `resolve_model`'s to report."""
    import huggingface_hub
    from open_clip.pretrained import has_hf_hub
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if cfg.get("file"):
        return None if os.path.isfile(cfg["file"]) else f"its file {cfg['file']} is missing"
    offline = huggingface_hub.is_offline_mode()
    if cfg.get("hf_hub") and has_hf_hub():
        problem = _hub_problem(cfg["hf_hub"], offline)
    elif cfg.get("url"):
        problem = _url_problem(cfg["url"], offline)
    else:
        return None  # an unknown tag, or one with nothing to fetch
    if problem is None:
        return None
    why = "huggingface_hub is offline (HF_HUB_OFFLINE=1)" if offline else "cannot be fetched from here"
    return f"{problem} and {why}"


def _check_readable(path) -> None:
    """A weights file that torch can open (a truncated or foreign file fails here, cheaply:
    a zip checkpoint is opened memory-mapped, its tensors not read)."""
    _read_state(path)


def _read_state(path) -> Optional[dict]:
    """The state dict of a torch checkpoint file, memory-mapped where possible; `CorruptCheckpoint`
    naming the file when it cannot be read. None for formats open_clip reads itself."""
    if str(path).endswith((".safetensors", ".npz", ".npy")):
        return None
    fix = "copy it again, or give another checkpoint of the run"
    with open(path, "rb") as f:
        head = f.read(4)
    if not zipfile.is_zipfile(path) and not head.startswith(b"\x80"):  # neither torch's zip nor a legacy pickle
        size = os.path.getsize(path)
        raise CorruptCheckpoint(f"{path}: not a readable checkpoint ({size} bytes, no zip directory: truncated "
                                f"or not PyTorch weights); {fix}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True, mmap=head.startswith(b"PK"))
    except Exception as err:  # noqa: BLE001 -- damaged archives and foreign pickles all end here
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise CorruptCheckpoint(f"{path}: not a readable checkpoint ({type(err).__name__}: "
                                f"{first.split('. ')[0][:160]}); {fix}") from None
    state = data.get("state_dict", data) if isinstance(data, dict) else None
    if not isinstance(state, dict) or not state or not all(hasattr(v, "shape") for v in state.values()):
        raise CorruptCheckpoint(f"{path}: holds no state dict of tensors; give a checkpoint written by the "
                                "trainer or open_clip")
    if next(iter(state)).startswith("module."):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def _refuse_resized(path, arch: str, state: dict, model: nn.Module) -> None:
    """open_clip resizes position embeddings that do not fit the architecture; refuse instead."""
    built = model.state_dict()
    diff = [f"{k} {list(v.shape)} in the file, {list(built[k].shape)} in '{arch}'"
            for k, v in state.items() if k in built and v.numel() != built[k].numel()]  # reshapes are fine
    if diff:
        raise ArchitectureMismatch(f"{path}: its weights do not fit '{arch}' ({diff[0]}); give the architecture "
                                   "it was trained as")


def _first_difference(err: BaseException) -> str:
    """The first useful line of torch's multi-line load_state_dict error."""
    lines = [line.strip().rstrip(".") for line in str(err).splitlines() if line.strip()]
    detail = next((line for line in lines[1:]), lines[0] if lines else type(err).__name__)
    return detail if len(detail) < 200 else detail[:200] + "..."
