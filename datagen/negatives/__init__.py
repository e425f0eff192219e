"""Hard-negative caption generators (swap / replace / add), one kind per function."""
from datagen.negatives.base import NEGATIVE_FNS, NegativeFn, NegativeGenerator, register_negative

__all__ = ["NEGATIVE_FNS", "NegativeFn", "NegativeGenerator", "register_negative"]
