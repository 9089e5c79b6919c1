"""Whether text can travel in a request: whether it encodes as UTF-8.

A Python string almost always does; one that holds a lone surrogate does not. Bytes that
are not UTF-8 in an argument or an environment variable (`$'\\xff'`) reach Python as
such surrogates (`'\\udcff'`, so that a file of that name can still be opened), and a
JSON `\\ud800` escape makes one too. httpx would fail on them deep inside a request.
"""

from __future__ import annotations


def is_utf8(text: str) -> bool:
    """True unless `text` holds a lone surrogate, which no UTF-8 request can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
