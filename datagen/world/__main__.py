"""Entry point: `python -m datagen.world build --out DIR --seed N` (see cli.py)."""
import sys

from datagen.world.cli import main

sys.exit(main())
