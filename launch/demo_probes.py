"""Probes of the demo's models on the world's own training data (docs/demo_leftright.md and
docs/demo.md): what a checkpoint has learned, independent of any benchmark.

    python launch/demo_probes.py pairs runs/demo/seed-0/world CKPT [CKPT ...]
    python launch/demo_probes.py negatives runs/demo/seed-0/world CKPT [CKPT ...]
    python launch/demo_probes.py leftright runs/demo/seed-0/world CKPT --out runs/lrprobe/seed-0.json
    python launch/demo_probes.py leftright runs/demo/seed-0/world CKPT --towers image --steps 2000 \
        --save-image-tower runs/lrbase/layout-base.pt

`pairs`: over mirrored pairs of `world/train_mirrored` (image + caption, the flipped image + the
mirrored caption), cos(caption, mirrored caption), cos(image, flipped image), cos of two random
captions, and the partner accuracy (each caption scores its own image above the other one).
`negatives`: over samples of `world/train`, the share of (sample, scene-edit negative) pairs whose
image scores its caption above the negative, per kind:subkind. Both use the evaluation transform,
the first shard's first `--n` samples, and one thread; one line per checkpoint on stdout.
`leftright`: supervised probes of each tower alone on the two-object scenes of
`world/train_mirrored` and their mirrors (`leftright_probe`), trained on `--train-shards` and
scored on `--test-shard`; `--towers` picks the towers probed, and `--save-image-tower PATH`
writes the checkpoint with its image tower finetuned by the heads (`save_image_tower`), a base
`model.pretrained` loads; `--contrastive-weight W` adds W x the trainer's CLIP loss on batches of
64 (image, caption) pairs of `world/train` to that finetune and trains both towers with it, and
`--head-weight 0` leaves the heads' loss out of it (the CLIP loss alone: the control).
"""
from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_samples(shard_set: Path, n: int | None, shard: int = 0) -> list[dict[str, bytes]]:
    """The first `n` samples (all when None) of shard number `shard` of a shard set, by key."""
    tars = sorted(shard_set.glob("*.tar"))
    if not tars:
        raise SystemExit(f"error: {shard_set} holds no .tar shards; build the world first (bash launch/demo.sh)")
    if shard >= len(tars):
        raise SystemExit(f"error: {shard_set} holds {len(tars)} shards, no shard number {shard}")
    from compclip.errors import DataError
    from compclip.shardset.shards import iter_raw_samples
    try:
        samples = {raw["__key__"]: {k: v for k, v in raw.items() if not k.startswith("__")}
                   for raw in iter_raw_samples(tars[shard])}
    except tarfile.ReadError as err:
        raise DataError(f"{tars[shard]}: not a readable tar shard ({' '.join(str(err).split())})") from err
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


LR_HEADS = ("left shape", "left colour", "right shape", "right colour")


def leftright_items(samples: list[dict[str, bytes]]) -> list[dict]:
    """Two items per two-object scene of mirrored samples: the scene (image, caption) and its mirror
    (flipped image, mirrored caption), each labelled [left shape, left colour, right shape, right
    colour] (`LR_HEADS`, indices into the world's vocabulary) from the scene's layout, so that the
    mirror's labels are the scene's with the two objects swapped. Three-object scenes are left out."""
    from compclip.datagen.world.vocab import COLOURS, SHAPES
    colours = list(COLOURS)
    items = []
    for s in samples:
        meta = json.loads(s["json"])
        objects, layout = meta["scene"]["objects"], meta["layout"]
        if len(objects) != 2:
            continue
        left, right = sorted(range(2), key=lambda k: layout[k]["cx"])

        def labels(a: int, b: int) -> list[int]:
            return [SHAPES.index(objects[a]["shape"]), colours.index(objects[a]["colour"]),
                    SHAPES.index(objects[b]["shape"]), colours.index(objects[b]["colour"])]
        combo = tuple(sorted(f"{o['colour']} {o['shape']}" for o in objects))
        items.append({"image": s["jpg"], "text": s["txt"].decode(), "labels": labels(left, right), "combo": combo})
        items.append({"image": s["partner.jpg"], "text": s["partner.txt"].decode(),
                      "labels": labels(right, left), "combo": combo})
    return items


def drop_combos(train: list[dict], test: list[dict], share: float, seed: int = 0) -> list[dict]:
    """`train` without the items of a random `share` of the object pairs (`combo`) of `test`."""
    combos = sorted({it["combo"] for it in test})
    dropped = set(random.Random(seed).sample(combos, round(share * len(combos))))
    return [it for it in train if it["combo"] not in dropped]


def leftright_scores(logp: list, labels) -> dict[str, float]:
    """Numbers of the four heads' log-probabilities (one (N, classes) tensor per head, `LR_HEADS`):
    `binding_acc`, the share of items whose heads place the true left object left of the true right
    one (object score: log p_left(its shape) + log p_left(its colour) minus the same for the right
    heads); a model that sees which objects are there but not where scores a scene and its mirror
    alike, so 50 %. `attribute_acc`, the heads' mean accuracy; `bag_attribute_acc`, the best a
    where-blind model can expect (a head's attribute shared by the two objects, else a coin flip)."""
    import torch

    def score(shape, colour):
        pick = lambda h, idx: logp[h].gather(1, idx[:, None])[:, 0]  # noqa: E731
        return pick(0, shape) + pick(1, colour) - pick(2, shape) - pick(3, colour)
    binding = score(labels[:, 0], labels[:, 1]) > score(labels[:, 2], labels[:, 3])
    attribute = torch.stack([logp[h].argmax(1) == labels[:, h] for h in range(4)], 1).float()
    shared = torch.stack([labels[:, 0] == labels[:, 2], labels[:, 1] == labels[:, 3]], 1).float()
    return {"binding_acc": 100 * float(binding.float().mean()), "attribute_acc": 100 * float(attribute.mean()),
            "bag_attribute_acc": 100 * float((0.5 + 0.5 * shared).mean()), "n": len(labels)}


def fit_linear(train_x, train_y, eval_x: list, classes: list[int]) -> list[list]:
    """A logistic regression per head (`classes[h]` classes) on standardised frozen features; the
    heads' log-probabilities on each array of `eval_x` (classes absent from training get a very low one)."""
    import numpy as np
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    scaler = StandardScaler().fit(train_x)
    out: list[list] = [[] for _ in eval_x]
    for h in range(4):
        clf = LogisticRegression(max_iter=1000).fit(scaler.transform(train_x), train_y[:, h])
        for k, x in enumerate(eval_x):
            full = np.full((len(x), classes[h]), -1e4)
            full[:, clf.classes_] = clf.predict_log_proba(scaler.transform(x))
            out[k].append(torch.from_numpy(full))
    return out


def finetune_heads(encoder, params, train_in, train_y, eval_in: list, classes: list[int], steps: int,
                   batch: int = 64, lr: float = 5e-4, seed: int = 0, extra_loss=None,
                   head_weight: float = 1.0) -> list[list]:
    """Train `encoder` (its `params`) end to end with one linear head per attribute on top (summed
    cross-entropy times `head_weight`, AdamW, weight decay 0.1, cosine schedule, random batches),
    plus `extra_loss()` at each step when given; the heads' log-probabilities on each input tensor of
    `eval_in`. `head_weight` 0 with an `extra_loss` trains on that loss alone (the heads then stay
    as initialised)."""
    import torch
    torch.manual_seed(seed)
    with torch.no_grad():
        heads = torch.nn.Linear(encoder(train_in[:2]).shape[1], sum(classes))
    opt = torch.optim.AdamW(list(params) + list(heads.parameters()), lr=lr, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    order = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(len(train_y), (batch,), generator=order)
        logits = heads(encoder(train_in[idx])).split(classes, 1)
        loss = head_weight * sum(torch.nn.functional.cross_entropy(lg, train_y[idx, h]) for h, lg in enumerate(logits))
        if extra_loss is not None:
            loss = loss + extra_loss()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        return [[lg.log_softmax(1) for lg in torch.cat([heads(encoder(x[i:i + 500])) for i in range(0, len(x), 500)])
                 .split(classes, 1)] for x in eval_in]


def contrastive_term(model, images, texts, text_ids, batch: int = 64, seed: int = 0):
    """A callable giving, at each call, the trainer's CLIP loss (`ContrastiveLoss`, captions of the
    same text masked as in training) of `model` on a random batch of `batch` (image, caption) pairs
    of `images` / `texts` (tokens), at the model's own logit scale, held fixed."""
    import torch
    from compclip.trainer.loss import ContrastiveLoss, Layout
    loss, order, norm = ContrastiveLoss(), torch.Generator().manual_seed(seed), torch.nn.functional.normalize
    n = torch.arange(batch)
    layout = Layout(text_to_image=n, text_valid=torch.ones(batch, dtype=torch.bool),
                    image_is_row=torch.ones(batch, dtype=torch.bool), negative_owner=torch.full((batch,), -1),
                    image_pair=torch.full((batch,), -1), image_ids=n, text_hash=n)

    def term():
        idx = torch.randint(len(texts), (batch,), generator=order)
        layout.text_hash = text_ids[idx]
        return loss(norm(model.encode_image(images[idx]), dim=-1), norm(model.encode_text(texts[idx]), dim=-1),
                    model.logit_scale.detach().exp(), layout)
    return term


def tower_features(model, tower: str, x) -> dict:
    """Frozen features of one tower: image `tokens` (the patch tokens, flattened), `pooled` (before
    the projection) and `embedding` (after it); text `pooled` (the end-of-text token) and `embedding`."""
    import torch
    from open_clip.transformer import text_global_pool
    out: dict[str, list] = defaultdict(list)
    for i in range(0, len(x), 500):
        if tower == "image":
            v = model.visual
            pooled, tokens = v._pool(v.transformer(v._embeds(x[i:i + 500])))
            parts = {"tokens": tokens.flatten(1), "pooled": pooled, "embedding": pooled @ v.proj}
        else:
            t = x[i:i + 500]
            h = model.ln_final(model.transformer(model.token_embedding(t) + model.positional_embedding,
                                                 attn_mask=model.attn_mask))
            pooled = text_global_pool(h, t, model.text_pool_type, eos_token_id=getattr(model, "text_eos_id", None))
            parts = {"pooled": pooled, "embedding": pooled @ model.text_projection}
        for k, v in parts.items():
            out[k].append(v)
    return {k: torch.cat(v).numpy() for k, v in out.items()}


def leftright_probe(load, preprocess, tokenizer, train: list[dict], test: list[dict], steps: int = 300,
                    load_random=None, towers=("image", "text"), finetuned: dict | None = None,
                    contrastive: tuple | None = None, contrastive_weight: float = 0.0,
                    head_weight: float = 1.0) -> dict:
    """Can each tower alone tell which object is on the left? Items of `leftright_items`; for the
    image tower (from the image) and the text tower (from the caption): a linear probe of each of
    its frozen features (`tower_features`) and the tower finetuned with the heads on its output
    embedding (`finetune_heads`, `steps` batches of 64 from `load()`); with `load_random`, the image
    tower finetuned from those random weights too. Only the `towers` named are probed; each
    finetuned model is put into `finetuned` (when given) under its entry's name. With
    `contrastive_weight` > 0, each image-tower finetune also adds that weight times the CLIP loss
    (`contrastive_term`) on the (images, caption tokens, caption ids) of `contrastive`, and trains
    both towers (every weight but the logit scale); `head_weight` scales the heads' loss there (0:
    the contrastive term alone, a control of the same steps and batches). Each entry:
    `leftright_scores` on `test`, on its items whose two objects never appear together in `train`
    (`unseen`), and `train_binding_acc`."""
    import torch
    from PIL import Image
    from compclip.datagen.world.vocab import COLOURS, SHAPES
    classes = [len(SHAPES), len(COLOURS)] * 2
    y_train, y_test = (torch.tensor([it["labels"] for it in items]) for items in (train, test))
    seen = {it["combo"] for it in train}
    unseen = torch.tensor([it["combo"] not in seen for it in test])

    def scores(logp_train, logp_test) -> dict:
        return {**leftright_scores(logp_test, y_test),
                "unseen": leftright_scores([lp[unseen] for lp in logp_test], y_test[unseen]),
                "train_binding_acc": leftright_scores(logp_train, y_train)["binding_acc"]}

    def images(items):
        return torch.stack([preprocess(Image.open(io.BytesIO(it["image"])).convert("RGB")) for it in items])
    inputs = {"image": images, "text": lambda items: tokenizer([it["text"] for it in items])}
    results: dict = {}
    for tower in towers:
        x_train, x_test = inputs[tower](train), inputs[tower](test)
        model = load().eval()
        with torch.no_grad():
            f_train, f_test = tower_features(model, tower, x_train), tower_features(model, tower, x_test)
        for kind in f_train:
            results[f"{tower} frozen {kind}, linear"] = scores(*fit_linear(f_train[kind], y_train.numpy(),
                                                                          [f_train[kind], f_test[kind]], classes))
        starts = [("finetuned", load)] + ([("from random weights", load_random)] if tower == "image" and load_random else [])
        for name, start in starts:
            model = start().train()
            encoder = model.visual if tower == "image" else model.encode_text
            aux = tower == "image" and contrastive_weight > 0
            params = [p for n, p in model.named_parameters() if n != "logit_scale" and (
                aux or (n.startswith("visual.") == (tower == "image")))]
            extra = None
            if aux:
                term = contrastive_term(model, *contrastive)
                extra = lambda term=term: contrastive_weight * term()  # noqa: E731
            results[f"{tower} {name}"] = scores(*finetune_heads(encoder, params, x_train, y_train, [x_train, x_test],
                                                                classes, steps, extra_loss=extra,
                                                                head_weight=head_weight if aux else 1.0))
            if finetuned is not None:
                finetuned[f"{tower} {name}"] = model.eval()
    return results


def save_image_tower(model, base: str, path: str) -> None:
    """Write `model` (the base `base` with its image tower finetuned, or both towers with
    `--contrastive-weight`) as a checkpoint in the trainer's format, its sidecar the base's with
    `pretrained` naming the base and no metrics (the base's no longer describe it)."""
    from compclip.models.checkpoint import read_meta, save_checkpoint
    meta = read_meta(base)
    if meta is None:
        raise SystemExit(f"error: {base} has no sidecar (.json); --save-image-tower needs a checkpoint of the demo")
    meta.pretrained, meta.metrics = str(base), {}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(out.parent, out.stem, model, meta, pointers=())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python launch/demo_probes.py", description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=["pairs", "negatives", "leftright"])
    parser.add_argument("world", help="a seed's world folder (runs/demo/seed-<s>/world)")
    parser.add_argument("checkpoints", nargs="+", help="checkpoint files (.pt) of the demo (any architecture: read from the checkpoint)")
    parser.add_argument("--n", type=int, help="samples read (default 256; leftright: per shard, default all)")
    parser.add_argument("--train-shards", type=int, nargs="+", default=[0, 1, 2], help="leftright: shards trained on")
    parser.add_argument("--test-shard", type=int, default=3, help="leftright: the held-out shard")
    parser.add_argument("--steps", type=int, default=300, help="leftright: finetuning steps (batch 64)")
    parser.add_argument("--random", action="store_true", help="leftright: also finetune the image tower from random weights")
    parser.add_argument("--unseen-combos", type=float, default=0.0, metavar="F",
                        help="leftright: leave a random share F of the held-out shard's object pairs out of training")
    parser.add_argument("--towers", nargs="+", choices=["image", "text"], default=["image", "text"],
                        help="leftright: the towers probed")
    parser.add_argument("--save-image-tower", metavar="PATH",
                        help="leftright, one checkpoint: write it with its image tower finetuned by the heads here")
    parser.add_argument("--contrastive-weight", type=float, default=0.0, metavar="W",
                        help="leftright: while finetuning the image tower, also train both towers with W x the CLIP "
                             "loss on batches of 64 (image, caption) pairs of world/train")
    parser.add_argument("--head-weight", type=float, default=1.0, metavar="H",
                        help="leftright, with --contrastive-weight: the heads' loss times H (0: the CLIP loss alone, "
                             "the control of the same steps and batches)")
    parser.add_argument("--out", help="leftright: write the results (JSON) here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch
    from PIL import Image
    from compclip.models.load import load_model
    torch.set_num_threads(1)
    world = Path(args.world)
    if args.probe == "leftright":
        if args.test_shard in args.train_shards:
            raise SystemExit(f"error: --test-shard {args.test_shard} is one of --train-shards")
        if args.head_weight != 1.0 and args.contrastive_weight <= 0:
            raise SystemExit("error: --head-weight needs --contrastive-weight (without it the heads are the only loss)")
        if args.save_image_tower and ("image" not in args.towers or len(args.checkpoints) != 1):
            raise SystemExit("error: --save-image-tower needs one checkpoint and the image tower in --towers")
        train = [it for k in args.train_shards
                 for it in leftright_items(read_samples(world / "train_mirrored", args.n, k))]
        test = leftright_items(read_samples(world / "train_mirrored", args.n, args.test_shard))
        train = drop_combos(train, test, args.unseen_combos)
        captions = [s for k in range(len(list((world / "train").glob("*.tar"))))
                    for s in read_samples(world / "train", args.n, k)] if args.contrastive_weight > 0 else []
        results = {}
        for ckpt in args.checkpoints:
            loaded = load_model(pretrained=ckpt, trim_text=False)

            def load_random(arch=loaded.info.arch):
                torch.manual_seed(0)
                return load_model(arch=arch, trim_text=False).model
            finetuned: dict = {}
            contrastive = None
            if captions:
                texts = [s["txt"].decode() for s in captions]
                ids = {t: i for i, t in enumerate(dict.fromkeys(texts))}
                contrastive = (torch.stack([loaded.preprocess(Image.open(io.BytesIO(s["jpg"])).convert("RGB"))
                                            for s in captions]),
                               loaded.tokenizer(texts), torch.tensor([ids[t] for t in texts]))
            results[ckpt] = leftright_probe(lambda: load_model(pretrained=ckpt, trim_text=False).model,
                                            loaded.preprocess, loaded.tokenizer, train, test, args.steps,
                                            load_random if args.random else None, args.towers, finetuned,
                                            contrastive, args.contrastive_weight, args.head_weight)
            if args.save_image_tower:
                save_image_tower(finetuned["image finetuned"], ckpt, args.save_image_tower)
            print(json.dumps({ckpt: results[ckpt]}))
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({"train_shards": args.train_shards, "test_shard": args.test_shard,
                                                  "towers": args.towers, "saved": args.save_image_tower,
                                                  "unseen_combos": args.unseen_combos, "steps": args.steps,
                                                  "contrastive_weight": args.contrastive_weight,
                                                  "head_weight": args.head_weight,
                                                  "results": results}, indent=1))
        return 0
    samples = read_samples(world / ("train_mirrored" if args.probe == "pairs" else "train"), args.n or 256)

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
    sys.path.insert(0, str(ROOT))
    from compclip.cli import run
    sys.exit(run(main))  # an error: one line naming the file, not a traceback
