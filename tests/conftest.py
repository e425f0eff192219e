"""Shared test set-up: offline hub, project-local caches, paths to ../shared fixtures, a small
synthetic-world benchmark folder."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HOME", str(ROOT / ".cache" / "hf"))
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))
os.environ.setdefault("COMPCLIP_SCORE_CACHE", "off")  # no scores kept between tests unless a test asks
SHARED = Path(os.environ.get("COMPCLIP_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    path = SHARED / "benchmarks"
    if not path.is_dir():
        pytest.fail(f"{path} is missing: the real benchmark text files must sit beside the repo "
                    "(or set COMPCLIP_SHARED)")
    return path


@pytest.fixture(scope="session")
def micro_model():
    """The smallest registered architecture, random weights, fixed seed."""
    import torch
    from compclip.models import load_model
    torch.manual_seed(0)
    return load_model("micro-vit-32")


@pytest.fixture(scope="session")
def world_benchmark_root(tmp_path_factory) -> Path:
    """Every benchmark in its real on-disk format, written by the synthetic world (datagen/world):
    a few items per file (ARO attribution keeps one whole group of 25), 32 px images."""
    from compclip.datagen.world.benchmarks import BenchSizes, write_benchmarks
    from compclip.datagen.world.splits import Split
    root = tmp_path_factory.mktemp("world_bench") / "benchmarks"
    write_benchmarks(root, Split.make(5), seed=5, size=32, sizes=BenchSizes().scaled(0.02), progress=False)
    return root
