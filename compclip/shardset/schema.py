"""The WebDataset shard schema: one typed sample, encoded to and decoded from tar members.

A sample is the files `<key>.<member>` inside a tar shard (keys hold no dots):

| member         | content                                                            | required |
|----------------|--------------------------------------------------------------------|----------|
| `jpg` / `png`  | the image, encoded                                                 | yes*     |
| `txt`          | the positive caption, UTF-8                                        | yes      |
| `json`         | metadata object (source, image_id, coco_id, ...)                   | no       |
| `neg.json`     | list of `{"text", "kind", "subkind", "source"}` hard negatives     | no       |
| `partner.jpg`  | partner image (generated negative image, or the mirrored scene)    | no       |
| `partner.txt`  | partner caption                                                    | with it  |
| `partner.json` | `{"kind": "generated" or "mirrored", "negative_index": int|null}`  | with it  |
| `nn.json`      | list of `{"key", "score"}`: nearest-neighbour images, best first   | no       |

(*) a sample may omit its image only while negatives are added to text-only data.
Every sample datagen writes has `meta["source"]` and `meta["image_id"]`, which identifies its
anchor image uniquely within that source (all captions of one image share it; the trainer masks
same-image pairs by it), and `meta["coco_id"]` (int) whenever the image is a COCO image (the same
number in every source; data preparation leaves benchmark images out by it). The plain
`jpg`/`txt` pair is what open_clip's own webdataset loader reads, so our shards feed it too.
docs/shard_schema.md is the prose version of this module.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from compclip.errors import SchemaError

SCHEMA_VERSION = 1
IMAGE_EXTS = ("jpg", "png", "webp")

# kind -> allowed sub-kinds. SugarCrepe's taxonomy (obj / att / rel) plus NegCLIP's swap types.
NEGCLIP_SWAP_TYPES = ("noun_chunk", "verb_phrase", "noun", "noun_plural", "adverb", "adjective")
SUBKINDS: dict[str, tuple[str, ...]] = {
    "swap": ("obj", "att", "rel") + NEGCLIP_SWAP_TYPES,
    "replace": ("obj", "att", "rel"),
    "add": ("obj", "att"),
}
PARTNER_KINDS = ("generated", "mirrored")


# a sample that does not follow the shard schema raises `SchemaError` (compclip.errors); the
# message names the key and member


@dataclass(frozen=True)
class Negative:
    """One hard-negative caption with its label."""
    text: str
    kind: str  # swap | replace | add
    subkind: str  # obj | att | rel, or a NegCLIP swap type
    source: str = ""  # generator name, e.g. "rules" or "llm:<model>"

    def __post_init__(self) -> None:
        if self.kind not in SUBKINDS:
            raise SchemaError(f"negative kind '{self.kind}' is not one of {sorted(SUBKINDS)}")
        if self.subkind not in SUBKINDS[self.kind]:
            raise SchemaError(f"negative sub-kind '{self.subkind}' is not valid for kind "
                              f"'{self.kind}' (one of {', '.join(SUBKINDS[self.kind])})")
        if not self.text.strip():
            raise SchemaError("negative caption is empty")

    def as_dict(self) -> dict[str, str]:
        """`dataclasses.asdict(self)` (the fields in order), ~15x faster: the fields are strings,
        nothing to copy deeply (a shard of 10,000 captions writes ~50,000 of these)."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Partner:
    """A second image-caption pair that must share a batch with its anchor."""
    image: bytes
    caption: str
    kind: str  # generated | mirrored
    image_ext: str = "jpg"
    negative_index: Optional[int] = None  # for kind=generated: which negative it depicts


@dataclass(frozen=True)
class Neighbour:
    key: str
    score: float


@dataclass
class ShardSample:
    key: str
    caption: str
    image: Optional[bytes] = None
    image_ext: str = "jpg"
    meta: dict[str, Any] = field(default_factory=dict)
    negatives: list[Negative] = field(default_factory=list)
    partner: Optional[Partner] = None
    neighbours: list[Neighbour] = field(default_factory=list)

    def to_wds(self) -> dict[str, Any]:
        """Encode as a webdataset sample dict (`__key__` plus one bytes value per member)."""
        if not self.key or "." in self.key or "/" in self.key:
            raise SchemaError(f"sample key '{self.key}' must be non-empty without '.' or '/'")
        out: dict[str, Any] = {"__key__": self.key, "txt": self.caption.encode("utf-8")}
        if self.image is not None:
            _check_ext(self.key, self.image_ext)
            out[self.image_ext] = self.image
        if self.meta:
            out["json"] = _dumps(self.meta)
        if self.negatives:
            out["neg.json"] = _dumps([n.as_dict() for n in self.negatives])
        if self.partner is not None:
            p = self.partner
            _check_ext(self.key, p.image_ext)
            if p.kind not in PARTNER_KINDS:
                raise SchemaError(f"sample '{self.key}': partner kind '{p.kind}' not in {PARTNER_KINDS}")
            out[f"partner.{p.image_ext}"] = p.image
            out["partner.txt"] = p.caption.encode("utf-8")
            out["partner.json"] = _dumps({"kind": p.kind, "negative_index": p.negative_index})
        if self.neighbours:
            out["nn.json"] = _dumps([asdict(n) for n in self.neighbours])
        return out

    @classmethod
    def from_wds(cls, raw: dict[str, Any], require_image: bool = True) -> "ShardSample":
        """Decode a raw (undecoded, bytes-valued) webdataset sample; SchemaError names the key."""
        key = raw.get("__key__", "?")
        where = f"sample '{key}'" + (f" in {raw['__url__']}" if "__url__" in raw else "")
        if "txt" not in raw:
            raise SchemaError(f"{where}: missing member 'txt' (the caption)")
        image_ext = next((e for e in IMAGE_EXTS if e in raw), None)
        if require_image and image_ext is None:
            raise SchemaError(f"{where}: missing image member (one of {', '.join(IMAGE_EXTS)})")
        try:
            negatives = [Negative(**n) for n in _loads(raw.get("neg.json"), [], where, "neg.json")]
            neighbours = [Neighbour(**n) for n in _loads(raw.get("nn.json"), [], where, "nn.json")]
        except (TypeError, SchemaError) as err:
            raise SchemaError(f"{where}: {err}") from None
        partner = None
        partner_ext = next((e for e in IMAGE_EXTS if f"partner.{e}" in raw), None)
        if partner_ext is not None:
            if "partner.txt" not in raw:
                raise SchemaError(f"{where}: partner image without member 'partner.txt'")
            info = _loads(raw.get("partner.json"), {}, where, "partner.json")
            kind = info.get("kind", "")
            if kind not in PARTNER_KINDS:
                raise SchemaError(f"{where}: partner.json kind '{kind}' not in {PARTNER_KINDS}")
            partner = Partner(image=raw[f"partner.{partner_ext}"],
                              caption=_text(raw["partner.txt"], where, "partner.txt"),
                              kind=kind, image_ext=partner_ext,
                              negative_index=info.get("negative_index"))
        meta = _loads(raw.get("json"), {}, where, "json")
        if not isinstance(meta, dict):
            raise SchemaError(f"{where}: member 'json' must be an object")
        return cls(key=key, caption=_text(raw["txt"], where, "txt"),
                   image=raw.get(image_ext) if image_ext else None,
                   image_ext=image_ext or "jpg", meta=meta, negatives=negatives, partner=partner,
                   neighbours=neighbours)


def _check_ext(key: str, ext: str) -> None:
    if ext not in IMAGE_EXTS:
        raise SchemaError(f"sample '{key}': image extension '{ext}' not in {IMAGE_EXTS}")


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _text(value: Any, where: str, member: str) -> str:
    if not isinstance(value, (bytes, bytearray)):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SchemaError(f"{where}: member '{member}' is not UTF-8 text (byte {err.start}: "
                          f"{value[err.start:err.start + 1]!r})") from None


def _loads(value: Any, default: Any, where: str, member: str) -> Any:
    if value is None:
        return default
    if isinstance(value, (bytes, bytearray, str)):
        try:
            return json.loads(value)
        except ValueError as err:  # not JSON, or bytes that are not UTF-8 text
            raise SchemaError(f"{where}: member '{member}' is not valid JSON ({err})") from None
    return value  # already decoded by a webdataset decoder
