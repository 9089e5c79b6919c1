"""The built-in demo kinds of the embedded default: `python -m wq.types.task.demo KIND`.

`echo` prints the payload it got on stdin; `sleep` waits `payload.seconds` (default
5) and says so. Enough to watch tasks queue, run and finish on a fresh machine.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    """Run one demo kind with the task's payload from stdin."""
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    text = sys.stdin.read()
    payload = json.loads(text) if text.strip() else {}
    if kind == "echo":
        print(json.dumps(payload, sort_keys=True), flush=True)
    elif kind == "sleep":
        seconds = payload.get("seconds", 5)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            # One line in the task's output and error, not a traceback.
            sys.stderr.write(f"sleep: seconds must be a number >= 0, not {seconds!r}\n")
            raise SystemExit(2)
        print(f"sleeping {seconds:g} s", flush=True)
        time.sleep(seconds)
        print("done", flush=True)
    else:
        sys.stderr.write(f"unknown demo kind {kind!r} (echo, sleep)\n")
        raise SystemExit(2)


if __name__ == "__main__":
    main()
