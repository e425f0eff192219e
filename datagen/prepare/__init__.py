"""Real data sources -> shard sets: `python -m datagen prepare {coco,trohn,cocobank}`.

Modules, one job each: `imagefiles` (image files -> checked bytes, clear errors), `coco` (COCO /
Karpathy captions + images -> negatives via `datagen.negatives.pipeline`, then neighbours via
`datagen.images.knn`), `trohn` (TROHN-Text / TROHN-Img Hugging Face datasets -> shards), `labels`
(a schema label for a negative caption that came without one), `cocobank` (COCO instance
cut-outs as an object bank for `datagen.images.stitch`), `cli` (the command line). The commands a user runs, from downloads to
the shard sets the recipes name, are in docs/data_prep.md.
"""
