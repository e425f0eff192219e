"""Probes of the demo's models on the world's own training data (docs/demo.md, the left-right and
caption-negative sections): what a checkpoint has learned, independent of any benchmark.

    python launch/demo_probes.py pairs runs/demo/seed-0/world CKPT [CKPT ...]
    python launch/demo_probes.py negatives runs/demo/seed-0/world CKPT [CKPT ...]

`pairs`: over mirrored pairs of `world/train_mirrored` (image + caption, the flipped image + the
mirrored caption), cos(caption, mirrored caption), cos(image, flipped image), cos of two random
captions, and the partner accuracy (each caption scores its own image above the other one).
`negatives`: over samples of `world/train`, the share of (sample, scene-edit negative) pairs whose
image scores its caption above the negative, per kind:subkind. Both use the evaluation transform,
the first shard's first `--n` samples, and one thread; one line per checkpoint on stdout.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_samples(shard_set: Path, n: int) -> list[dict[str, bytes]]:
    tars = sorted(shard_set.glob("*.tar"))
    if not tars:
        raise SystemExit(f"error: {shard_set} holds no .tar shards; build the world first (bash launch/demo.sh)")
    with tarfile.open(tars[0]) as tar:
        members = {name: tar.extractfile(name).read() for name in tar.getnames()}
    samples: dict[str, dict[str, bytes]] = defaultdict(dict)
    for name, data in members.items():
        key, _, ext = name.partition(".")
        samples[key][ext] = data
    return [samples[k] for k in sorted(samples)[:n]]


def pair_probe(model, preprocess, tokenizer, samples: list[dict[str, bytes]]) -> dict[str, float]:
    """The `pairs` numbers of one model over mirrored samples (eval transform, no gradients)."""
    import torch
    from PIL import Image
    norm = torch.nn.functional.normalize

    def images(items):
        return norm(model.encode_image(torch.stack(
            [preprocess(Image.open(io.BytesIO(x)).convert("RGB")) for x in items])), dim=-1)

    def texts(items):
        return norm(torch.cat([model.encode_text(tokenizer(items[i:i + 512]))
                               for i in range(0, len(items), 512)]), dim=-1)

    with torch.no_grad():
        img, flip = images([s["jpg"] for s in samples]), images([s["partner.jpg"] for s in samples])
        cap = texts([s["txt"].decode() for s in samples])
        mir = texts([s["partner.txt"].decode() for s in samples])
    right = (((img * cap).sum(1) > (flip * cap).sum(1)).float().mean()
             + ((flip * mir).sum(1) > (img * mir).sum(1)).float().mean()) / 2
    return {"cos_caption_mirrored": float((cap * mir).sum(1).mean()),
            "cos_image_flipped": float((img * flip).sum(1).mean()),
            "cos_random_captions": float((cap * cap.roll(1, 0)).sum(1).mean()),
            "partner_acc": 100 * float(right), "pairs": len(samples)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python launch/demo_probes.py", description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=["pairs", "negatives"])
    parser.add_argument("world", help="a seed's world folder (runs/demo/seed-<s>/world)")
    parser.add_argument("checkpoints", nargs="+", help="checkpoint files (.pt) of the demo (any architecture: read from the checkpoint)")
    parser.add_argument("--n", type=int, default=256, help="samples read (default 256)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch
    from PIL import Image
    from compclip.models.load import load_model
    torch.set_num_threads(1)
    world = Path(args.world)
    samples = read_samples(world / ("train_mirrored" if args.probe == "pairs" else "train"), args.n)

    def image(data: bytes):
        return Image.open(io.BytesIO(data)).convert("RGB")

    for ckpt in args.checkpoints:
        loaded = load_model(pretrained=ckpt)  # the architecture from its sidecar
        model, pre, tok = loaded.model.eval(), loaded.preprocess, loaded.tokenizer
        norm = torch.nn.functional.normalize

        def embed_images(items):
            return norm(model.encode_image(torch.stack([pre(image(x)) for x in items])), dim=-1)

        def embed_texts(texts):
            return norm(torch.cat([model.encode_text(tok(texts[i:i + 512])) for i in range(0, len(texts), 512)]), dim=-1)

        with torch.no_grad():
            if args.probe == "pairs":
                p = pair_probe(model, pre, tok, samples)
                print(f"{ckpt}: cos(caption, mirrored caption) {p['cos_caption_mirrored']:.4f}, "
                      f"cos(image, flipped image) {p['cos_image_flipped']:.4f}, "
                      f"cos(random captions) {p['cos_random_captions']:.4f}, "
                      f"partner acc {p['partner_acc']:.1f} % ({p['pairs']} pairs)")
            else:
                img = embed_images([s["jpg"] for s in samples])
                texts = [s["txt"].decode() for s in samples]
                owner, labels = [], []
                for i, s in enumerate(samples):
                    for neg in json.loads(s.get("neg.json", b"[]")):
                        texts.append(neg["text"])
                        owner.append(i)
                        labels.append(f"{neg['kind']}:{neg['subkind']}")
                txt = embed_texts(texts)
                positive = (img * txt[:len(samples)]).sum(1)
                hits: dict[str, list[float]] = defaultdict(list)
                for j, (i, label) in enumerate(zip(owner, labels)):
                    hits[label].append(float(positive[i] > img[i] @ txt[len(samples) + j]))
                print(f"{ckpt}: " + ", ".join(f"{label} {100 * sum(v) / len(v):.0f} % (n={len(v)})"
                                             for label, v in sorted(hits.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
