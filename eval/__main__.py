"""`python -m eval`: see `eval.cli`."""
import sys

from compclip.eval.cli import main

sys.exit(main())
