"""The manifest of a shard set: its file name and its reading (the fields: docs/shard_schema.md).

`compclip.shardset.shards` writes and checks manifests; `compclip.shardset.order` reads a source
set's order record from one.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compclip.shardset.schema import SchemaError

MANIFEST = "manifest.json"


def read_manifest(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no manifest; is {directory} a shard set?")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise SchemaError(f"{path}: manifest is not valid JSON ({err})") from None
