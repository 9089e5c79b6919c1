"""The values the API's item filters take, known to every client without asking.

The server's own lists are in `wq.engine.models`; these are repeated here so that a
`wq` command or the TUI does not import the engine (SQLAlchemy) to check a filter.
`tests/client/test_vocabulary.py` keeps the two equal.
"""

PHASES = ("active", "completed", "failed", "cancelled")
ADMISSIONS = ("queued", "admitted", "idle", "done")
