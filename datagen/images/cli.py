"""The image commands of `python -m datagen`: `stitch` (stitched left-right / above-below pairs),
`knn` (nearest-neighbour hard images), `genimages` (an image per negative caption). Each writes a
shard set into `--out`; `datagen/__main__.py` prints its summary (docs/images.md).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from compclip.cli import InputError, comma_list
from compclip.datagen.cliargs import (abs_path, check_model, check_shard_set, load_scorer, model_args, model_options, pin,
                             positive_int, scale_arg, shard_args, shard_options, size_arg)


def _diffusers_backend(args):
    from compclip.datagen.images.genimages import DiffusersBackend, tiny_pipeline
    common = dict(steps=args.steps, guidance=args.guidance, size=args.size,
                  batch_size=args.batch_size, device=args.device)
    if args.model == "tiny":  # random weights: a smoke test, not real images
        return DiffusersBackend(tiny_pipeline(args.seed, args.size or 32), name="diffusers:tiny", **common)
    try:
        return DiffusersBackend.from_pretrained(args.model, **common)
    except (OSError, ValueError) as err:
        raise InputError(f"--model {args.model}: cannot load a diffusers pipeline; give a local "
                         "pipeline folder, a hub id this machine can reach (or has cached), or "
                         "'tiny'") from err


def cmd_stitch(args) -> dict:
    if args.nouns and not args.model:
        raise InputError("--nouns needs --model (a diffusers model id, local folder or 'tiny')")
    bank = Path(args.bank)
    if not (args.world_bank or args.nouns):
        from compclip.shardset.imageio import list_image_files
        if not bank.is_dir():
            raise InputError(f"{bank}: no such folder; give a folder of object images (--bank)")
        if not list_image_files(bank):
            raise InputError(f"{bank}: no object images (.png, .jpg, ...) in this folder; give "
                             "a bank folder (python -m datagen prepare cocobank) or --world-bank SIZE")
    pin(args, {"--bank": abs_path(args.bank), "--world-bank": args.world_bank,
                   "--nouns": comma_list(args.nouns), "--n": args.n,
                   "--canvas": "%dx%d" % args.canvas, "--relations": comma_list(args.relations),
                   "--scale": list(args.scale), "--gap": args.gap, "--ext": args.ext,
                   "--backgrounds": abs_path(args.backgrounds), "--key-prefix": args.key_prefix,
                   "--seed": args.seed, **shard_options(args)},
        inputs=[args.backgrounds] + ([] if args.world_bank or args.nouns else [args.bank]))  # else made here
    from compclip.datagen.images.stitch import write_stitched
    if args.world_bank:
        from compclip.datagen.world import write_object_bank
        write_object_bank(bank, args.world_bank, args.seed)
    elif args.nouns:
        from compclip.datagen.images.genimages import write_generated_object_bank
        write_generated_object_bank(_diffusers_backend(args), comma_list(args.nouns), bank, args.seed)
    return write_stitched(args.out, bank, args.n, args.seed, args.canvas, comma_list(args.relations),
                          args.scale, args.gap, args.ext, args.backgrounds,
                          args.key_prefix, args.max_count, args.max_bytes, progress=not args.quiet)


def cmd_knn(args) -> dict:
    check_shard_set(args.src)
    if args.workers is not None and args.workers < 0:
        raise InputError(f"--workers {args.workers}: give 0 (decode in this process) or more")
    check_model(args)
    pin(args, {"--src": abs_path(args.src), "--k": args.k, "--method": args.method,
               "--dtype": args.dtype, "--dup-threshold": args.dup_threshold,
               "--factory": args.factory, "--nprobe": args.nprobe, **model_options(args),
               **shard_options(args)}, inputs=[args.src])
    from compclip.datagen.images.knn import run_knn
    return run_knn(args.src, args.out, load_scorer(args), args.k, args.method, args.batch_size,
                   args.dtype, args.dup_threshold, args.factory, args.nprobe, args.work_dir,
                   args.max_count, args.max_bytes, args.workers, progress=not args.quiet)


def cmd_genimages(args) -> dict:
    check_shard_set(args.src)
    if args.backend == "diffusers" and not args.model:
        raise InputError("genimages --backend diffusers needs --model (hub id, local folder or 'tiny')")
    options = {"--src": abs_path(args.src), "--backend": args.backend,
               "--kinds": comma_list(args.kinds), "--subkinds": comma_list(args.subkinds),
               "--per-sample": args.per_sample, "--candidates": args.candidates,
               "--pick": args.pick, "--seed": args.seed, "--ext": args.ext, "--size": args.size,
               **shard_options(args)}
    if args.backend == "diffusers":
        options.update({"--model": args.model, "--steps": args.steps, "--guidance": args.guidance})
    if args.pick == "clip":
        check_model(args)
        options.update(model_options(args))
    pin(args, options, inputs=[args.src])
    from compclip.datagen.images.genimages import RendererBackend, write_generated
    if args.backend == "renderer":
        backend = RendererBackend(size=args.size or 224)
    else:
        backend = _diffusers_backend(args)
    scorer = load_scorer(args) if args.pick == "clip" else None
    return write_generated(args.src, args.out, backend, comma_list(args.kinds) or None,
                           comma_list(args.subkinds) or None, args.per_sample, args.candidates,
                           args.pick, scorer, args.seed, args.ext, args.gen_batch, args.max_count,
                           args.max_bytes, progress=not args.quiet)


def _diffusers_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="", help="diffusers model id or local folder ('tiny': random)")
    p.add_argument("--steps", type=positive_int, default=25, help="diffusion steps per image")
    p.add_argument("--guidance", type=float, default=7.5, help="classifier-free guidance scale")
    p.add_argument("--size", type=positive_int, default=None, help="generated image size in pixels")
    p.add_argument("--device", default="cpu", help="torch device of the models")
    if not any(a.dest == "batch_size" for a in p._actions):
        p.add_argument("--batch-size", type=positive_int, default=8, help="images per model batch")


def add_parsers(sub) -> None:
    """`stitch`, `knn`, `genimages` as subcommands of `sub`."""
    p = sub.add_parser("stitch", help="left-right / above-below stitched pairs from an object bank")
    p.add_argument("--bank", required=True, help="folder of object images (+ backgrounds/)")
    p.add_argument("--world-bank", type=int, default=0, metavar="SIZE",
                   help="first write the synthetic world's object bank at this size into --bank")
    p.add_argument("--nouns", default="", help="first generate a bank from these comma-separated "
                   "nouns with diffusers (--model)")
    p.add_argument("--n", type=positive_int, required=True, help="number of pairs (samples)")
    p.add_argument("--canvas", type=size_arg, default="224", help="canvas size, e.g. 224 or 320x224")
    p.add_argument("--relations", default="left,above", help="left, above or both, comma-separated")
    p.add_argument("--scale", type=scale_arg, default="0.25,0.45",
                   help="object size range, fractions of the canvas side")
    p.add_argument("--gap", type=int, default=4, help="pixels between the two objects at least")
    p.add_argument("--backgrounds", default=None, help="backgrounds folder (if not given: <bank>/backgrounds)")
    p.add_argument("--ext", default="jpg", choices=["jpg", "png"], help="image format")
    p.add_argument("--key-prefix", default="lr", help="sample keys are <prefix><pair index>")
    _diffusers_args(p)
    shard_args(p)
    p.set_defaults(run=cmd_stitch)

    p = sub.add_parser("knn", help="add the K nearest-neighbour images (nn.json) to a shard set")
    p.add_argument("--src", required=True, help="input shard set")
    p.add_argument("--k", type=positive_int, default=3, help="neighbours per image")
    p.add_argument("--method", default="auto", choices=["auto", "exact", "flat", "approx"],
                   help="auto: exact up to 300k images, else approx; flat: faiss IndexFlatIP "
                        "(same answers as exact, slower here)")
    p.add_argument("--factory", default=None,
                   help="faiss index factory for approx (if not given: IVF<4sqrtN>,SQfp16)")
    p.add_argument("--nprobe", type=positive_int, default=None,
                   help="IVF lists searched per query (approx; if not given: the smallest of 8, 16, "
                        "32, ... whose recall@K on 1,000 sample queries reaches 0.97)")
    p.add_argument("--dup-threshold", type=float, default=0.999,
                   help="cosine at or above which two images count as duplicates")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32"], help="embeddings stored as")
    p.add_argument("--work-dir", default=None, help="embeddings memmap folder (if not given: <out>/.knn)")
    p.add_argument("--workers", type=int, default=None,
                   help="image decoding processes for the embedding pass (if not given: min(4, cores); 0: none)")
    model_args(p)
    shard_args(p, seed=False)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)  # no effect; old scripts pass it
    p.set_defaults(run=cmd_knn)

    p = sub.add_parser("genimages", help="an image per negative caption, as the partner pair")
    p.add_argument("--src", required=True, help="input shard set with neg.json")
    p.add_argument("--backend", default="renderer", choices=["renderer", "diffusers"],
                   help="renderer: the synthetic world (offline); diffusers: --model")
    p.add_argument("--kinds", default="", help="negative kinds to depict, comma-separated ('': all)")
    p.add_argument("--subkinds", default="", help="negative sub-kinds to depict, comma-separated ('': all)")
    p.add_argument("--per-sample", type=positive_int, default=1, help="partners per source sample at most")
    p.add_argument("--candidates", type=positive_int, default=1, help="images drawn per caption")
    p.add_argument("--pick", default="first", choices=["first", "clip"],
                   help="which candidate to keep (clip: best score under --arch/--pretrained)")
    p.add_argument("--gen-batch", type=positive_int, default=16, help="captions per generation batch")
    p.add_argument("--ext", default="jpg", choices=["jpg", "png"], help="image format")
    _diffusers_args(p)
    model_args(p)
    shard_args(p)
    p.set_defaults(run=cmd_genimages)
