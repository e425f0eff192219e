"""Data generation: hard-negative captions, synthetic scenes, stitched pairs, neighbours, shards."""
