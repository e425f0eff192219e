"""`python -m eval`: see `eval.cli`."""
import sys

from eval.cli import main

sys.exit(main())
