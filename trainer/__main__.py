"""`python -m trainer RECIPE [key.sub=value ...]`: the same program as `trainer/train.py`."""
import sys

from compclip.trainer.train import main

if __name__ == "__main__":
    sys.exit(main())
