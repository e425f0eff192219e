"""One module per benchmark; importing this package registers them all (see `eval.registry`)."""
from compclip.eval.benchmarks import aro, bivlc, diagnostics, retrieval, sugarcrepe, sugarcrepe_pp, visla, zeroshot  # noqa: F401
from compclip.eval.benchmarks.base import Benchmark, BenchmarkResult, DataError, MissingData

__all__ = ["Benchmark", "BenchmarkResult", "DataError", "MissingData"]
