"""The shard set format: schema, writer and manifest, order and shuffle, image I/O, benchmark image ids."""
