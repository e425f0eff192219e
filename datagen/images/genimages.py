"""Generated hard-negative images (TROHN-Img): an image for each chosen negative caption, written
as the sample's partner pair (kind "generated", `negative_index` = position in `neg.json`).

Backends turn captions + per-caption seeds into images (`None` = cannot depict: skipped, counted):
- `RendererBackend`: offline, `datagen.world.render_caption(caption, size, seed)`; captions
  outside the world's grammar (`datagen.world.ParseError`) or contradictory ones
  (`PlacementError`) are skipped.
- `DiffusersBackend`: a text-to-image pipeline (`StableDiffusionPipeline.from_pretrained` of a
  model id or local folder, no safety checker), batched, one seeded `torch.Generator` per
  caption, so an image depends on its caption and seed only (up to float rounding differences
  between batch compositions). `tiny_pipeline()` builds a randomly initialised one from small
  configs, nothing downloaded (tests, benchmarks).

`write_generated` reads a shard set with `neg.json`, keeps negatives of the requested kinds /
sub-kinds, takes `per_sample` of them per sample (a seeded shuffle of the eligible ones), and
generates `candidates` images per caption, keeping one: `pick="first"` (the first candidate the
backend could draw) or `pick="clip"` (the highest cosine similarity to the caption under a
scorer). Output samples copy the source members byte for byte and add `partner.*`; the first
generated partner keeps the source key (so `nn.json` keys still resolve), further ones get
`<key>_g<j>`. Seeds derive from (seed, sample index, negative index, candidate). Resumable.
The output keeps the source's sample order (manifest `order` with `inherited_from`) and its
record of excluded benchmark images; with `per_sample` > 1 the outputs of one source sample
(same anchor image) are written next to each other, so such a set is marked
`"adjacent_outputs": true` in its order record: put it in a global order with
`python -m datagen shuffle` before training.
"""
from __future__ import annotations

import json
import logging
import random
import tempfile
from collections import Counter
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

import numpy as np
from PIL import Image

from compclip.shardset.imageio import decode_image, encode_image
from compclip.shardset.order import inherited_order
from compclip.shardset.shards import (CARRIED_KEYS, ShardSetWriter, iter_raw_samples, read_manifest,
                            shard_urls)

log = logging.getLogger(__name__)
PICK_RULES = ("first", "clip")


class ImageBackend(Protocol):
    name: str

    def generate(self, captions: Sequence[str], seeds: Sequence[int]) -> list[Optional[Image.Image]]:
        """One image per caption (None where the backend cannot depict it)."""


def caption_seed(seed: int, sample: int, negative: int, candidate: int = 0) -> int:
    return int(np.random.SeedSequence([seed, sample, negative, candidate]).generate_state(1)[0])


def _as_image(value, where: str) -> Image.Image:
    if isinstance(value, tuple):  # e.g. (image, scene)
        value = value[0]
    if isinstance(value, (bytes, bytearray)):
        return decode_image(bytes(value), where, "RGB")
    if isinstance(value, np.ndarray):
        return Image.fromarray(value).convert("RGB")
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    raise TypeError(f"{where}: renderer returned {type(value).__name__}, not an image")


class RendererBackend:
    """The synthetic world's renderer; `render`/`errors` override it (tests, other worlds)."""

    def __init__(self, size: int = 224, render: Optional[Callable] = None,
                 errors: Optional[tuple[type[Exception], ...]] = None):
        if render is None or errors is None:
            import compclip.datagen.world as world  # imported lazily: only this backend needs it
            render = render or world.render_caption
            # outside the grammar, or contradictory (PlacementError): cannot be depicted
            errors = errors or tuple({world.ParseError, getattr(world, "PlacementError", world.ParseError)})
        self.size, self.render, self.errors = size, render, errors
        self.name = "renderer"

    def generate(self, captions, seeds):
        out = []
        for caption, seed in zip(captions, seeds):
            try:
                out.append(_as_image(self.render(caption, self.size, seed), f"render of '{caption}'"))
            except self.errors as err:
                log.debug("cannot render '%s': %s", caption, err)
                out.append(None)
        return out


class DiffusersBackend:
    """A diffusers text-to-image pipeline, batched, seeded per caption."""

    def __init__(self, pipeline, steps: int = 25, guidance: float = 7.5, size: Optional[int] = None,
                 batch_size: int = 4, device: str = "cpu", name: str = "diffusers"):
        self.pipe = pipeline.to(device)
        self.pipe.set_progress_bar_config(disable=True)
        self.steps, self.guidance, self.size = steps, guidance, size
        self.batch_size, self.device, self.name = batch_size, device, name

    @classmethod
    def from_pretrained(cls, model: str, dtype: str = "float32", **kwargs) -> "DiffusersBackend":
        """`model`: a hub id (needs the hub or its cache) or a local pipeline folder."""
        import torch
        from diffusers import StableDiffusionPipeline
        extra = {} if dtype == "float32" else {"torch_dtype": getattr(torch, dtype)}
        try:
            pipe = StableDiffusionPipeline.from_pretrained(
                model, safety_checker=None, requires_safety_checker=False, **extra)
        except (OSError, ValueError) as err:
            raise FileNotFoundError(f"cannot load diffusers pipeline '{model}': {err}") from None
        return cls(pipe, name=f"diffusers:{model}", **kwargs)

    def generate(self, captions, seeds):
        import torch
        out: list[Optional[Image.Image]] = []
        size = {"height": self.size, "width": self.size} if self.size else {}
        for start in range(0, len(captions), self.batch_size):
            chunk = list(captions[start:start + self.batch_size])
            gens = [torch.Generator("cpu").manual_seed(int(s)) for s in seeds[start:start + self.batch_size]]
            with torch.no_grad():
                result = self.pipe(prompt=chunk, generator=gens, num_inference_steps=self.steps,
                                   guidance_scale=self.guidance, output_type="pil", **size)
            out.extend(im.convert("RGB") for im in result.images)
        return out


def tiny_pipeline(seed: int = 0, size: int = 32):
    """A randomly initialised StableDiffusionPipeline from small configs; nothing downloaded.

    The tokenizer is a transformers `CLIPTokenizer` written from open_clip's bundled BPE vocab.
    """
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(seed)
    bpe = SimpleTokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        vocab, merges = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        vocab.write_text(json.dumps(bpe.encoder))
        ranked = sorted(bpe.bpe_ranks.items(), key=lambda item: item[1])
        merges.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for (a, b), _ in ranked))
        special = {"bos_token": "<start_of_text>", "eos_token": "<end_of_text>",
                   "unk_token": "<end_of_text>", "pad_token": "<end_of_text>"}
        tokenizer = CLIPTokenizer(str(vocab), str(merges), model_max_length=77, **special)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(bpe.encoder), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=77, projection_dim=32,
        bos_token_id=bpe.encoder["<start_of_text>"], eos_token_id=bpe.encoder["<end_of_text>"],
        pad_token_id=bpe.encoder["<end_of_text>"]))
    unet = UNet2DConditionModel(
        sample_size=size // 4, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(16, 32), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16, 16),
                        down_block_types=("DownEncoderBlock2D",) * 3,
                        up_block_types=("UpDecoderBlock2D",) * 3, sample_size=size, norm_num_groups=8)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    return StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)


def generate_picked(backend: ImageBackend, captions: Sequence[str], seeds: Sequence[Sequence[int]],
                    pick: str = "first", scorer=None) -> list[Optional[Image.Image]]:
    """Draw len(seeds[i]) candidates of caption i in one backend call and keep one of them."""
    if pick not in PICK_RULES:
        raise ValueError(f"pick rule '{pick}' not one of {PICK_RULES}")
    if pick == "clip" and scorer is None:
        raise ValueError("pick='clip' needs a scorer (a `models.encode.OpenClipEncoder`) to rank candidates")
    flat_caps = [c for c, s in zip(captions, seeds) for _ in s]
    flat = backend.generate(flat_caps, [x for s in seeds for x in s])
    out, pos = [], 0
    for caption, cand_seeds in zip(captions, seeds):
        cands = [im for im in flat[pos:pos + len(cand_seeds)] if im is not None]
        pos += len(cand_seeds)
        if not cands or pick == "first" or len(cands) == 1:
            out.append(cands[0] if cands else None)
            continue
        sims = scorer.encode_images(cands) @ scorer.encode_texts([caption])[0]
        out.append(cands[int(sims.argmax())])
    return out


def choose_negatives(negatives: list[dict], index: int, seed: int, per_sample: int,
                     kinds: Optional[Sequence[str]] = None,
                     subkinds: Optional[Sequence[str]] = None) -> list[int]:
    """Positions in neg.json to depict: eligible by kind/sub-kind, a seeded shuffle, first N."""
    eligible = [i for i, n in enumerate(negatives)
                if (not kinds or n.get("kind") in kinds) and (not subkinds or n.get("subkind") in subkinds)]
    random.Random(f"choose:{seed}:{index}").shuffle(eligible)  # str seeds are stable
    return eligible[:per_sample]


def _partner_members(image: Image.Image, caption: str, negative_index: int, ext: str) -> dict:
    return {f"partner.{ext}": encode_image(image, ext), "partner.txt": caption.encode("utf-8"),
            "partner.json": json.dumps({"kind": "generated", "negative_index": negative_index},
                                       separators=(",", ":")).encode()}


def _last_shard_keys(directory: Path) -> set[str]:
    shards = read_manifest(directory)["shards"] if (directory / "manifest.json").is_file() else []
    if not shards:
        return set()
    return {raw["__key__"] for raw in iter_raw_samples(directory / shards[-1]["name"])}


def write_generated(src: str | Path, dst: str | Path, backend: ImageBackend,
                    kinds: Optional[Sequence[str]] = None, subkinds: Optional[Sequence[str]] = None,
                    per_sample: int = 1, candidates: int = 1, pick: str = "first", scorer=None,
                    seed: int = 0, ext: str = "jpg", batch_size: int = 16, max_count: int = 10_000,
                    max_bytes: int = 1 << 30, progress: bool = False) -> dict:
    """Add a generated partner image per chosen negative caption; resumes an interrupted `dst`.
    `progress`: a bar on stderr (source samples done of the source set's total).

    Skip reasons (per input sample): `no_negative` (none of the requested kinds),
    `unrenderable` (the backend could depict none of its chosen captions), `corrupt_json`.
    Captions skipped inside samples that kept another one are counted in the manifest's
    `genimages.unrenderable_captions` (for this run's part on a resumed set).
    """
    dst = Path(dst)
    features = dict(read_manifest(src).get("features", {}))
    features["partner"] = "generated"
    done_keys = _last_shard_keys(dst)  # a sample's outputs may straddle the last complete shard
    src_manifest = read_manifest(src)
    order = inherited_order(src, src_manifest)
    if per_sample > 1:
        order["adjacent_outputs"] = True
    writer = ShardSetWriter(dst, max_count=max_count, max_bytes=max_bytes, features=features,
                            order=order)
    writer.manifest.update({k: src_manifest[k] for k in CARRIED_KEYS if k in src_manifest})
    writer.manifest["genimages"] = {"backend": backend.name, "kinds": list(kinds or []),
                                    "subkinds": list(subkinds or []), "per_sample": per_sample,
                                    "candidates": candidates, "pick": pick, "seed": seed}
    stats: Counter = Counter()
    start = writer.inputs_done
    pending: list[tuple[int, dict, list[int]]] = []
    from compclip.cli import progress as bar_of
    total = sum(s["samples"] for s in src_manifest["shards"])
    bar = bar_of(total=total, initial=min(start, total), desc="genimages", unit="sample",
                 quiet=not progress)

    def flush() -> None:
        bar.update(len(pending))
        jobs = [(row, raw, j) for row, raw, chosen in pending for j in chosen]
        negs = {row: json.loads(raw["neg.json"]) for row, raw, _ in pending}
        images = generate_picked(
            backend, [negs[row][j]["text"] for row, _, j in jobs],
            [[caption_seed(seed, row, j, c) for c in range(candidates)] for row, _, j in jobs],
            pick, scorer)
        by_row: dict[int, list] = {}
        for (row, _, j), image in zip(jobs, images):
            by_row.setdefault(row, []).append((j, image))
        for row, raw, _ in pending:
            made = [(j, im) for j, im in by_row[row] if im is not None]
            stats["unrenderable_captions"] += len(by_row[row]) - len(made)
            if not made:
                writer.skip("unrenderable")
                continue
            for out_no, (j, image) in enumerate(made):
                key = raw["__key__"] if out_no == 0 else f"{raw['__key__']}_g{out_no}"
                last = out_no == len(made) - 1
                if key in done_keys:  # written before an interruption, in a complete shard
                    continue
                members = {k: v for k, v in raw.items() if not k.startswith("partner.")}
                members["__key__"] = key
                writer.add_raw(members, inputs=int(last),
                               extra=_partner_members(image, negs[row][j]["text"], j, ext))
                stats["images"] += 1
        pending.clear()

    for row, raw in enumerate(raw for url in shard_urls(src) for raw in iter_raw_samples(url)):
        if row < start:
            continue
        try:
            negatives = json.loads(raw.get("neg.json", b"[]"))
        except json.JSONDecodeError:
            log.warning("sample '%s': neg.json is not valid JSON; skipped", raw["__key__"])
            writer.skip("corrupt_json")
            bar.update(1)
            continue
        chosen = choose_negatives(negatives, row, seed, per_sample, kinds, subkinds)
        if not chosen:
            writer.skip("no_negative")
            bar.update(1)
            continue
        pending.append((row, raw, chosen))
        if sum(len(c) for _, _, c in pending) * candidates >= batch_size:
            flush()
    flush()
    bar.close()
    writer.manifest["genimages"]["unrenderable_captions"] = stats["unrenderable_captions"]
    return writer.close()


def write_generated_object_bank(backend: ImageBackend, nouns: Sequence[str], out_dir: str | Path,
                                seed: int = 0, prompt: str = "a photo of a {}") -> list[Path]:
    """An object bank for `datagen.images.stitch` from noun prompts: `<noun>.png` per noun (opaque)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    images = backend.generate([prompt.format(n) for n in nouns],
                              [caption_seed(seed, i, 0) for i in range(len(nouns))])
    paths = []
    for noun, image in zip(nouns, images):
        if image is None:
            log.warning("no image for noun '%s'", noun)
            continue
        path = out_dir / f"{noun.strip().replace(' ', '_')}.png"
        path.write_bytes(encode_image(image, "png"))
        paths.append(path)
    return paths

