"""The built-in demo kinds of the embedded default: `python -m wq.types.task.demo KIND`.

`echo` prints the payload it got on stdin; `sleep` waits `payload.seconds` (default
5, at most a day) and says so; `count` prints a line a second up to `payload.to`
(default 30, at most 86400), every fifth on stderr, for a live log to follow. Enough
to watch tasks queue, run and finish on a fresh machine.
"""

from __future__ import annotations

import json
import sys
import time

# The bounds the kinds' payload schemas hold submissions to (a day either way). Checked
# here too, for tasks stored before those schemas did: `time.sleep` cannot wait 1e308 s.
MAX_SECONDS = 86400
MAX_COUNT = 86400


def main() -> None:
    """Run one demo kind with the task's payload from stdin."""
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    text = sys.stdin.read()
    payload = json.loads(text) if text.strip() else {}
    if kind == "echo":
        print(json.dumps(payload, sort_keys=True), flush=True)
    elif kind == "sleep":
        seconds = payload.get("seconds", 5)
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= MAX_SECONDS
        ):
            # One line in the task's output and error, not a traceback.
            sys.stderr.write(
                f"sleep: seconds must be a number from 0 to {MAX_SECONDS}, not {seconds!r}\n"
            )
            raise SystemExit(2)
        print(f"sleeping {seconds:g} s", flush=True)
        time.sleep(seconds)
        print("done", flush=True)
    elif kind == "count":
        to = payload.get("to", 30)
        if isinstance(to, float) and to.is_integer():
            to = int(to)  # 5.0 is a whole number to JSON Schema, which let it in
        if isinstance(to, bool) or not isinstance(to, int) or not 0 <= to <= MAX_COUNT:
            sys.stderr.write(
                f"count: to must be a whole number from 0 to {MAX_COUNT}, not {to!r}\n"
            )
            raise SystemExit(2)
        for number in range(1, to + 1):
            stream = sys.stderr if number % 5 == 0 else sys.stdout
            print(f"{number} of {to}", file=stream, flush=True)
            if number < to:
                time.sleep(1)
    else:
        sys.stderr.write(f"unknown demo kind {kind!r} (echo, sleep, count)\n")
        raise SystemExit(2)


if __name__ == "__main__":
    main()
