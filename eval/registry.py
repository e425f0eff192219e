"""timm-style benchmark registry: `@register_benchmark` on a class, look up by name.

    from compclip.eval.registry import get_benchmark, list_benchmarks
    bench = get_benchmark("sugarcrepe").load("data/")
"""
from __future__ import annotations

_REGISTRY: dict[str, type] = {}


def register_benchmark(cls):
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"benchmark '{cls.name}' is already registered by {_REGISTRY[cls.name].__module__}")
    _REGISTRY[cls.name] = cls
    return cls


def _ensure_loaded() -> None:
    import compclip.eval.benchmarks  # noqa: F401  (each module registers its benchmark on import)


def list_benchmarks() -> list[str]:
    _ensure_loaded()
    return sorted(_REGISTRY)


def get_benchmark(name: str):
    _ensure_loaded()
    if name not in _REGISTRY:
        raise KeyError(f"unknown benchmark '{name}'; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]
