"""The old entry point `python -m datagen.world ...`, kept until 0.3: a deprecation note, then
the same program as `python -m datagen world ...` (datagen/world/cli.py)."""
import sys

from compclip.cli import deprecated
from compclip.datagen.world.cli import main

deprecated("python -m datagen.world", "python -m datagen world")
sys.exit(main(prog="python -m datagen.world"))
