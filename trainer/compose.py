"""The batch composer: raw shard samples -> items -> a `trainer.batch.Batch`.

`Composer.item(raw, rng, source)` decodes one webdataset sample (`ShardSample.from_wds`) into an
`Item`: the preprocessed anchor image and caption, its partner pair and its hard negatives.

- partner `neighbour`: one of the K keys of `nn.json` is sampled each time; its jpg + txt are
  fetched from the shard set through `compclip.shardset.shards.KeyIndex` (`keys.tsv`).
- partner `generated` / `mirrored`: the sample's own `partner.*` members.
- negatives: `negatives.per_image` captions from `neg.json` sampled without replacement each
  time, keeping only the recipe's kinds / sub-kinds; a generated partner's own negative
  (`negative_index`) is left out since its caption is already a column. With `draw: uniform`
  every eligible candidate is equally likely; with `by_subkind` each draw first picks a
  (kind, sub-kind) uniformly among those with candidates left, then a candidate of it (NegCLIP's
  one-per-swap-type choice, `draw_by_subkind`). A neighbour partner also gets
  `negatives.per_partner` captions drawn the same way from the neighbour's own `neg.json` (read
  through `keys.tsv`; a neighbour without one has none). Anchors and partners with too few
  negatives get padding columns (`text_valid=False`).

Images: one above PIL's decompression-bomb limit (`Image.MAX_IMAGE_PIXELS`, the limit
`compclip.shardset.imageio.decode_image` refuses above) is a `BadSample`, found from its header before any
pixel is decoded. With `draft_size`, a JPEG much larger than the model's input is decoded at a
reduced size (PIL `draft`, scales 1/2 to 1/8, never below `draft_size` on either side) before the
transform; the transform may return uint8 tensors (normalised later on the device,
`trainer.transforms`).

`Composer.collate(items)` lays out B items as the contract says: images `[anchors | partners]`,
texts `[captions | partner captions | anchor negatives | partner negatives]`, B x `per_image`
then P x `per_partner` columns, with partners of the first P anchors (P is at
most `partner_anchors`: in a mixed batch, `data.source_batch`, the anchors of the sources that
carry partners, which the stream puts first). All randomness comes from the `rng` passed in (and
a torch seed drawn from it for the image augmentation), so a sample's composition depends only on
its position in the stream. `negative_choice` (exact epochs with `data.visit_each_negative`) takes
that one eligible negative instead of a random draw.

Ids for the loss's same-source mask: an image's id is `stable_id(image_key(meta, key))`, where the
key is `coco:<coco_id>` for COCO images, else `<source>:<image_id>` from the sample's `json`, else
the sample key (a generated or mirrored partner is its own image: `<anchor image>/partner`); a
text's id is `stable_id` of its lower-cased, whitespace-normalised text.
"""
from __future__ import annotations

import hashlib
import io
import json
import random
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from PIL import Image

from compclip.shardset.schema import IMAGE_EXTS, Negative, SchemaError, ShardSample
from compclip.shardset.shards import KeyIndex
from compclip.trainer.batch import Batch
from compclip.errors import CompclipError


class BadSample(CompclipError, ValueError):
    """A sample that cannot be used (corrupt image, broken schema, missing neighbour)."""


def stable_id(text: str) -> int:
    """A 63-bit id of a string, the same in every process and run."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def image_key(meta: dict, key: str) -> str:
    """What identifies a sample's source image (see the module docstring)."""
    if meta.get("coco_id") is not None:
        return f"coco:{int(meta['coco_id'])}"
    if meta.get("image_id") is not None:
        return f"{meta.get('source', '')}:{meta['image_id']}"
    return f"key:{key}"


def text_key(text: str) -> str:
    return " ".join(text.lower().split())


def negative_allowed(kind: str, subkind: str, kinds, subkinds) -> bool:
    return kind in kinds and (subkinds is None or subkind in subkinds)


def draw_by_subkind(pool: list[Negative], k: int, rng: random.Random) -> list[str]:
    """Up to `k` texts of `pool` without replacement: each a (kind, sub-kind) chosen uniformly among
    those with candidates left, then one of its candidates uniformly."""
    groups: dict[tuple[str, str], list[str]] = {}
    for n in pool:  # in neg.json order: the draw depends only on the data and the rng
        groups.setdefault((n.kind, n.subkind), []).append(n.text)
    chosen: list[str] = []
    while groups and len(chosen) < k:
        label = rng.choice(list(groups))
        texts = groups[label]
        chosen.append(texts.pop(rng.randrange(len(texts))))
        if not texts:
            del groups[label]
    return chosen


def open_image(data: bytes, what: str) -> Image.Image:
    """The image's header, pixels not decoded yet; BadSample when it cannot be read or is above
    PIL's decompression-bomb limit (`Image.MAX_IMAGE_PIXELS`, which `compclip.shardset.imageio.decode_image`
    turns into an error the same way)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            return Image.open(io.BytesIO(data))
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as err:
        raise BadSample(f"{what}: image too large, not decoded ({err}); datagen refuses it too") from None
    except Exception as err:  # PIL raises many types for corrupt data
        raise BadSample(f"{what}: cannot decode image ({type(err).__name__}: {err})") from None


@dataclass
class Item:
    key: str
    image: torch.Tensor
    caption: str
    partner_image: Optional[torch.Tensor] = None
    partner_caption: Optional[str] = None
    negatives: list[str] = field(default_factory=list)
    partner_negatives: list[str] = field(default_factory=list)  # the neighbour partner's own
    image_id: int = 0
    partner_image_id: int = 0


@dataclass
class Composer:
    preprocess: Callable  # PIL image -> tensor (open_clip's train transform)
    tokenizer: Callable  # list[str] -> LongTensor
    batch_size: int  # B
    partner: str = "none"  # none | neighbour | generated | mirrored
    partners_per_batch: Optional[int] = None  # P; None: one per anchor
    negatives_per_image: int = 0
    negatives_per_partner: int = 0  # neighbour partners only
    draw: str = "uniform"  # uniform | by_subkind
    kinds: tuple[str, ...] = ("swap", "replace", "add")
    subkinds: Optional[tuple[str, ...]] = None
    partner_anchors: Optional[int] = None  # the first anchors, which can have a partner; None: all B
    draft_size: Optional[int] = None  # decode JPEGs at a reduced size >= this (PIL draft); None: full size
    _indexes: dict = field(default_factory=dict, repr=False)

    @property
    def num_partners(self) -> int:
        if self.partner == "none":
            return 0
        anchors = self.batch_size if self.partner_anchors is None else self.partner_anchors
        return anchors if self.partners_per_batch is None else min(self.partners_per_batch, anchors)

    # --- one sample ---------------------------------------------------------------------------
    def _image(self, data: bytes, rng: random.Random, what: str) -> torch.Tensor:
        image = open_image(data, what)
        try:
            if self.draft_size and image.format == "JPEG":  # DCT-domain downscale: less to decode
                image.draft("RGB", (self.draft_size, self.draft_size))
            image.load()
        except Exception as err:  # PIL raises many types for corrupt data
            raise BadSample(f"{what}: cannot decode image ({type(err).__name__}: {err})") from None
        with torch.random.fork_rng(devices=[]):  # augmentation seeded by the stream position
            # the CPU generator only: torch.manual_seed also queues lazy CUDA/XPU/MTIA seeding,
            # recording a Python stack each time (~30% of a plain sample's composing time)
            torch.random.default_generator.manual_seed(rng.getrandbits(63))
            return self.preprocess(image.convert("RGB"))

    def _neighbour(self, sample: ShardSample, source_dir: Optional[str], rng: random.Random):
        where = f"sample '{sample.key}'"
        if not sample.neighbours:
            raise BadSample(f"{where}: no nn.json neighbours")
        if source_dir not in self._indexes:
            self._indexes[source_dir] = KeyIndex(source_dir)
        index = self._indexes[source_dir]
        order = list(sample.neighbours)
        rng.shuffle(order)
        for nb in order:  # first one that resolves, in random order: one sampled neighbour
            if nb.key not in index:
                continue
            for ext in IMAGE_EXTS:
                try:
                    data = index.read(nb.key, ext)
                except KeyError:
                    continue
                image = self._image(data, rng, f"{where} neighbour '{nb.key}'")
                try:
                    meta = json.loads(index.read(nb.key, "json"))
                except (KeyError, ValueError):
                    meta = {}
                try:
                    caption = index.read(nb.key, "txt").decode("utf-8")
                except UnicodeDecodeError as err:
                    raise BadSample(f"{where} neighbour '{nb.key}': caption is not UTF-8 ({err})") from None
                negatives = self._stored_negatives(index, nb.key, where) if self.negatives_per_partner else []
                return image, caption, stable_id(image_key(meta, nb.key)), negatives
        raise BadSample(f"{where}: none of its {len(order)} neighbours is in {source_dir}/keys.tsv")

    @staticmethod
    def _stored_negatives(index: KeyIndex, key: str, where: str) -> list[Negative]:
        """A neighbour's `neg.json` (none: no negatives)."""
        try:
            data = index.read(key, "neg.json")
        except KeyError:
            return []
        try:
            return [Negative(**n) for n in json.loads(data)]
        except (ValueError, TypeError) as err:  # bad JSON, SchemaError, wrong fields
            raise BadSample(f"{where} neighbour '{key}': member 'neg.json' is unusable ({err})") from None

    def _eligible(self, negatives: list[Negative], skip: Optional[int] = None) -> list[Negative]:
        return [n for i, n in enumerate(negatives)
                if i != skip and negative_allowed(n.kind, n.subkind, self.kinds, self.subkinds)]

    def _draw(self, pool: list[Negative], k: int, rng: random.Random) -> list[str]:
        if self.draw == "by_subkind":
            return draw_by_subkind(pool, k, rng)
        return [n.text for n in rng.sample(pool, min(k, len(pool)))]

    def _negatives(self, sample: ShardSample, rng: random.Random, with_partner: bool,
                   choice: Optional[int] = None) -> list[str]:
        generated = with_partner and sample.partner is not None and self.partner == "generated"
        pool = self._eligible(sample.negatives, sample.partner.negative_index if generated else None)
        if choice is not None:
            if choice >= len(pool):
                raise BadSample(f"sample '{sample.key}': has {len(pool)} eligible negatives, visit asks for #{choice}")
            return [pool[choice].text]
        return self._draw(pool, self.negatives_per_image, rng)

    def item(self, raw: dict, rng: random.Random, source_dir: Optional[str] = None,
             with_partner: bool = True, negative_choice: Optional[int] = None) -> Item:
        """One composed sample; `with_partner=False` for anchors past the first P of a batch."""
        try:
            sample = ShardSample.from_wds(raw)
        except SchemaError as err:  # a text member that is not UTF-8 included: it names the member
            raise BadSample(str(err)) from None
        where = f"sample '{sample.key}'" + (f" in {raw['__url__']}" if "__url__" in raw else "")
        item = Item(sample.key, self._image(sample.image, rng, where), sample.caption)
        source_image = image_key(sample.meta, sample.key)
        item.image_id = stable_id(source_image)
        item.partner_image_id = stable_id(source_image + "/partner")  # a generated / mirrored image
        with_partner = with_partner and self.num_partners > 0
        partner_pool: list[Negative] = []
        if with_partner and self.partner == "neighbour":
            item.partner_image, item.partner_caption, item.partner_image_id, partner_pool = \
                self._neighbour(sample, source_dir, rng)
        elif with_partner:  # generated | mirrored: the sample's own partner members
            if sample.partner is None or sample.partner.kind != self.partner:
                have = sample.partner.kind if sample.partner else "none"
                raise BadSample(f"{where}: needs a '{self.partner}' partner, has {have}")
            item.partner_image = self._image(sample.partner.image, rng, f"{where} partner")
            item.partner_caption = sample.partner.caption
        if self.negatives_per_image:
            item.negatives = self._negatives(sample, rng, with_partner, negative_choice)
        if with_partner and self.negatives_per_partner:  # after the anchor's: the rng is used as before
            item.partner_negatives = self._draw(self._eligible(partner_pool), self.negatives_per_partner, rng)
        return item

    # --- a batch --------------------------------------------------------------------------------
    def collate(self, items: list[Item]) -> Batch:
        b, p = len(items), self.num_partners
        per, per_partner = self.negatives_per_image, self.negatives_per_partner
        assert b == self.batch_size, f"collate needs {self.batch_size} items, got {b}"
        partners = items[:p]
        negatives, valid = padded([i.negatives for i in items], per)
        partner_negatives, partner_valid = padded([i.partner_negatives for i in partners], per_partner)
        texts = ([i.caption for i in items] + [i.partner_caption for i in partners] + negatives
                 + partner_negatives)
        return Batch(
            images=torch.stack([i.image for i in items] + [i.partner_image for i in partners]),
            texts=self.tokenizer(texts),
            num_anchors=b,
            partner_of=torch.arange(p),
            negative_of=torch.cat([torch.arange(b).repeat_interleave(per),  # the image each was made from
                                   torch.arange(b, b + p).repeat_interleave(per_partner)]),
            text_valid=torch.tensor([True] * (b + p) + valid + partner_valid, dtype=torch.bool),
            keys=[i.key for i in items],
            image_ids=torch.tensor([i.image_id for i in items] + [i.partner_image_id for i in partners]),
            text_ids=torch.tensor([stable_id(text_key(t)) for t in texts]),
        )


def padded(negatives: list[list[str]], per: int) -> tuple[list[str], list[bool]]:
    """`per` columns for each list of negatives, padded with "" (invalid) where it is shorter."""
    texts, valid = [], []
    for drawn in negatives:
        pad = per - len(drawn)
        texts += drawn + [""] * pad
        valid += [True] * len(drawn) + [False] * pad
    return texts, valid
