#!/usr/bin/env python
"""The floor under the API's figures: a bare FastAPI endpoint on the same server.

`benchmarks/api.py --floor` runs this as a subprocess after wq's load and sends it the
same GET item load. It answers `GET /api/work-items/{id}` with a fixed document (GET
item's own answer, read from wq before) after checking the Bearer token by
comparison: a sync endpoint under uvicorn with the daemon's server settings, nothing
else (no database, no middleware, no auth tiers, no metrics). Its CPU per request is
what FastAPI, uvicorn and h11 cost on this machine for such an answer; wq's divided
by it is a figure that compares across machines, unlike milliseconds.

    python api_floor.py PORT DOCUMENT_FILE TOKEN
"""

from __future__ import annotations

import socket
import sys
import uuid
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Header, HTTPException, Response

from wq.daemon.http_protocol import bounded_protocol


def floor_app(document: bytes, token: str) -> FastAPI:
    """One route answering `document` to a caller with `token`."""
    app = FastAPI()
    expected = f"Bearer {token}"

    @app.get("/api/work-items/{item_id}")
    def read_item(item_id: uuid.UUID, authorization: str = Header("")) -> Response:
        if authorization != expected:
            raise HTTPException(401, "a Bearer token is required")
        return Response(document, media_type="application/json")

    return app


def main() -> None:
    port, document, token = int(sys.argv[1]), Path(sys.argv[2]).read_bytes(), sys.argv[3]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(
        floor_app(document, token),
        log_config=None,
        access_log=False,
        proxy_headers=False,
        # The daemon's event loop and HTTP parser (wq.daemon.serve).
        loop="uvloop",
        http=bounded_protocol(10.0),
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
