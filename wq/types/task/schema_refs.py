"""A kind's `payload_schema`: every `$ref` in it must resolve inside the schema itself.

The validator resolves a `$ref` only when a payload reaches it, and wq fetches no
schema over the network: a reference to nothing would fail each submission that
reaches it with a server error. Checked when the config loads, instead.
"""

from __future__ import annotations

from typing import Any

from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

# Keywords whose values are data, not schemas: a "$ref" key there is no reference.
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def unresolvable_ref(schema: dict[str, Any]) -> str | None:
    """The first `$ref` in the schema that does not resolve within it, or None."""
    root = DRAFT202012.create_resource(schema)
    registry: Registry[Any] = Registry().with_resource(root.id() or "", root).crawl()
    return _first_unresolvable(schema, registry.resolver(base_uri=root.id() or ""), schema)


def _first_unresolvable(node: Any, resolver: Any, root: Any) -> str | None:
    if isinstance(node, list):
        children: list[Any] = node
    elif isinstance(node, dict):
        if node is not root and isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except Unresolvable:
                return ref
        children = [value for key, value in node.items() if key not in DATA_KEYWORDS]
    else:
        return None
    for child in children:
        found = _first_unresolvable(child, resolver, root)
        if found is not None:
            return found
    return None
