"""`wq tui` is a registered command with its options."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from typer.testing import CliRunner

from wq.cli.main import app


def test_tui_command_has_its_options() -> None:
    result = CliRunner().invoke(app, ["tui", "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.stdout
    for option in ("--url", "--refresh", "--readonly"):
        assert option in result.stdout


def test_tui_refuses_a_too_short_refresh() -> None:
    result = CliRunner().invoke(app, ["tui", "--refresh", "0"], catch_exceptions=False)
    assert result.exit_code == 2


class WrongShape(BaseHTTPRequestHandler):
    """A server that answers every GET with JSON wq does not expect."""

    def do_GET(self) -> None:
        body = b'[{"project": "x"}]' if self.path == "/api/pools" else b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_crash_ends_the_tui_with_a_non_zero_exit() -> None:
    # The app dies on the unexpected pool document; `wq tui` used to exit 0 regardless.
    server = ThreadingHTTPServer(("127.0.0.1", 0), WrongShape)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    primary, secondary = pty.openpty()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        env = {**os.environ, "WQ_TOKEN": "x", "TERM": "xterm-256color"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "wq", "tui", "--url", url],
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            env=env,
            start_new_session=True,
        )
        os.close(secondary)
        # Drain the terminal so the app never blocks writing to it.
        threading.Thread(target=drain, args=(primary,), daemon=True).start()
        assert proc.wait(timeout=60) != 0
    finally:
        server.shutdown()
        with contextlib.suppress(OSError):
            os.close(primary)


def drain(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 65536):
            pass
