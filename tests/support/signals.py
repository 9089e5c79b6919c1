"""Child processes that answer Ctrl-C whatever the test runner's own disposition is.

A process started from a script in the background (`pytest &`) inherits SIGINT as
ignored, and Python then installs no KeyboardInterrupt handler: a test that stops its
child with SIGINT would wait for nothing. Pass `preexec_fn=default_sigint` to Popen.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """In the child, before exec: SIGINT back to its default, so Python handles it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
