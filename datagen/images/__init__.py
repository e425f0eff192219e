"""Image shard sets: stitched pairs, kNN hard negatives, generated images."""
