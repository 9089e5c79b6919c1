"""Work-item types, one package per type.

Each type package exposes `register(registry, settings)` and defines its models in
`models.py`; the daemon registers the types that `handled_types` names.
"""

from __future__ import annotations

import importlib

# Type name -> package. A new type is a new package here plus a migration.
KNOWN_TYPES: dict[str, str] = {"mr": "wq.types.mr", "task": "wq.types.task"}


def load_all_models() -> None:
    """Import the models of every known type, so that every table is mapped."""
    for package in KNOWN_TYPES.values():
        importlib.import_module(f"{package}.models")
