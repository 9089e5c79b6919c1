"""Reading a config file's YAML: safely, one meaning per key, and with errors on one line.

PyYAML's safe loader is the base; on top of it a key given twice in one mapping is
refused, as is a document whose aliases expand past what anything should walk, or
whose nesting would end the parser in a `RecursionError`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml


def yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: the problem and where it is."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None)
    if mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(problem)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the
    last: a setting repeated further down a long file would silently win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults`: what it brings may be overridden
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, refusing a key given twice in a mapping, and a document that
    holds more than `MAX_CONFIG_VALUES` values once its aliases are expanded, or whose
    nesting is too deep for the parser (its recursion would end in a traceback)."""
    try:
        document = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply (real configs nest a few levels)") from None
    _refuse_expansion(document)
    return document


# Values a config document may hold, its aliases expanded: real ones hold hundreds.
# Aliases of aliases ("billion laughs") stay small in memory, the parser sharing what
# an alias names, but everything that walks the document (validation, a kind's payload
# schema) walks every expanded value, for hours.
MAX_CONFIG_VALUES = 1_000_000


def _refuse_expansion(document: Any) -> None:
    """Raise `yaml.YAMLError` once the walk of `document` passes `MAX_CONFIG_VALUES`."""
    pending = [document]
    values = 0
    while pending:
        value = pending.pop()
        values += 1
        if values > MAX_CONFIG_VALUES:
            raise yaml.YAMLError(
                f"more than {MAX_CONFIG_VALUES:,} values once its aliases are expanded"
            )
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
