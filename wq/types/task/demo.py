"""The built-in demo kinds of the embedded default: `python -m wq.types.task.demo KIND`.

`echo` prints the payload it got on stdin; `sleep` waits `payload.seconds` (default
5) and says so; `count` prints a line a second up to `payload.to` (default 30), every
fifth on stderr, for a live log to follow. Enough to watch tasks queue, run and
finish on a fresh machine.
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
    elif kind == "count":
        to = payload.get("to", 30)
        if isinstance(to, bool) or not isinstance(to, int) or to < 0:
            sys.stderr.write(f"count: to must be a whole number >= 0, not {to!r}\n")
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
