"""The values the API's item filters take, known to every client without asking.

The server's own lists are in `wq.engine.models`; these are repeated here so that a
`wq` command or the TUI does not import the engine (SQLAlchemy) to check a filter.
`tests/client/test_vocabulary.py` keeps the two equal.
"""

PHASES = ("active", "completed", "failed", "cancelled")
ADMISSIONS = ("queued", "admitted", "idle", "done")

# The phases an item is in for each action to apply (the server's rule, said first).
ACTIONABLE_PHASES = {"retry": ("failed", "cancelled"), "cancel": ("active",)}
_DONE = {"retry": "retried", "cancel": "cancelled"}


def phase_refusal(action: str, phase: str | None) -> str | None:
    """Why `action` (retry, cancel) cannot apply to an item in `phase`; None if it can."""
    takes = ACTIONABLE_PHASES[action]
    if phase in takes:
        return None
    return f"only {' or '.join(takes)} items can be {_DONE[action]} (this one is {phase})"
