"""The fake log store: ``python -m stack.logship.store --relp-port P --http-port Q --ledger FILE``.

It receives the shipper's messages over RELP (rsyslog's acknowledged protocol: a message
counts as delivered once the store answered ``200 OK`` for its transaction number), and
records each one in its own SQLite ledger *before* acknowledging it. So a store killed
between the insert and the ack holds a line the shipper will send again: RELP is
at-least-once, and the checker counts those duplicates (chaos/checkers/logship.py).

The ledger file is created 0600 (its journal files take its mode); the read API
(``GET /lines``, ``GET /stats``) wants ``X-Log-Token`` (``PROCTOR_LOG_STORE_TOKEN``) and
answers 401 without it. Both listeners bind 127.0.0.1 (``--host``: a container's
every address on compose, where the shipper is another container and the read API is
published on the host's 127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import sqlite3
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["LogLedger", "RelpError", "main", "parse_frame_header"]

HOST = "127.0.0.1"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS lines (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at REAL NOT NULL,
    file TEXT NOT NULL,
    offset TEXT NOT NULL,
    line_time TEXT NOT NULL,
    msg TEXT NOT NULL
);
"""
_MAX_FRAME = 1 << 20


class RelpError(ValueError):
    """A frame that is not RELP: the connection is dropped (the shipper resends what was unacked)."""


class LogLedger:
    """One row per message received, inserted before the ack. Thread-safe via one lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(_SCHEMA)

    def record(self, payload: str) -> None:
        try:
            line = json.loads(payload)
            fields = (str(line.get("file", "")), str(line.get("offset", "")), str(line.get("t", "")), str(line.get("msg", "")))
        except (ValueError, AttributeError):
            fields = ("", "", "", payload)  # not our template: kept whole, never dropped
        with self._lock:
            self._conn.execute("INSERT INTO lines (received_at, file, offset, line_time, msg) VALUES (?, ?, ?, ?, ?)",
                               (time.time(), *fields))

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            cursor = self._conn.execute("SELECT id, received_at, file, offset, line_time, msg FROM lines ORDER BY id")
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM lines").fetchone()[0])


def parse_frame_header(header: bytes) -> tuple[int, str, int]:
    """``TXNR SP COMMAND SP DATALEN`` -> (txnr, command, datalen); RelpError when malformed."""
    parts = header.split(b" ")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit():
        raise RelpError(f"bad RELP header {header[:60]!r}")
    txnr, command, datalen = int(parts[0]), parts[1].decode("ascii", "replace"), int(parts[2])
    if datalen > _MAX_FRAME:
        raise RelpError(f"RELP frame of {datalen} bytes")
    return txnr, command, datalen


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
    header = b""
    while True:  # TXNR SP COMMAND SP DATALEN, then SP DATA or straight the trailer
        byte = await reader.readexactly(1)
        if byte in (b" ", b"\n") and header.count(b" ") == 2:
            break
        header += byte
        if len(header) > 64:
            raise RelpError("RELP header too long")
    txnr, command, datalen = parse_frame_header(header.strip(b"\n"))
    data = b""
    if byte == b" ":
        data = await reader.readexactly(datalen)
        await reader.readexactly(1)  # the trailer
    return txnr, command, data


def _response(txnr: int, body: str) -> bytes:
    raw = body.encode()
    return f"{txnr} rsp {len(raw)} ".encode() + raw + b"\n"


async def _serve_relp(ledger: LogLedger, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            txnr, command, data = await _read_frame(reader)
            if command == "open":
                writer.write(_response(txnr, "200 OK\nrelp_version=0\nrelp_software=proctor-logstore\ncommands=syslog"))
            elif command == "syslog":
                ledger.record(data.decode("utf-8", "replace"))  # recorded first, acknowledged second
                writer.write(_response(txnr, "200 OK"))
            elif command == "close":
                writer.write(_response(txnr, ""))
                await writer.drain()
                return
            else:
                writer.write(_response(txnr, f"500 unknown command {command}"))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, RelpError):
        return
    finally:
        writer.close()


def _read_api(ledger: LogLedger, token: str) -> type[BaseHTTPRequestHandler]:
    class ReadApi(BaseHTTPRequestHandler):
        server_version = "logstore"
        sys_version = ""

        def log_message(self, *args: Any) -> None:  # no access log of its own
            return

        def do_GET(self) -> None:  # http.server's name for the GET handler
            given = self.headers.get("X-Log-Token", "")
            if not token or not hmac.compare_digest(given.encode(), token.encode()):
                return self._send(401, {"detail": "missing or wrong X-Log-Token"})
            if self.path == "/lines":
                return self._send(200, {"store": "logs", "exported_at": time.time(), "lines": ledger.rows()})
            if self.path == "/stats":
                return self._send(200, {"lines": ledger.count()})
            return self._send(404, {"detail": "not found"})

        def _send(self, status: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return ReadApi


async def _run(args: argparse.Namespace, ledger: LogLedger, token: str) -> None:
    # RELP listens before the read API does: readiness is probed over HTTP (/stats), and a probe
    # that got its answer while RELP was still binding let a shipper, or a test, find the RELP
    # port refused (a rehearsal of make test failed so, 8 December 2026).
    server = await asyncio.start_server(lambda r, w: _serve_relp(ledger, r, w), args.host, args.relp_port)
    async with server:  # closed however this ends, a read API that cannot bind included
        http = ThreadingHTTPServer((args.host, args.http_port), _read_api(ledger, token))
        threading.Thread(target=http.serve_forever, name="logstore-read-api", daemon=True).start()
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.logship.store")
    parser.add_argument("--host", default=HOST, help="the address both listeners bind (default 127.0.0.1)")
    parser.add_argument("--relp-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    args = parser.parse_args(argv)
    from stack.config import load_settings

    token = load_settings().log_store_token
    if not token:
        print("log store: PROCTOR_LOG_STORE_TOKEN is empty: the read API would be open", file=sys.stderr)
        return 2
    try:
        asyncio.run(_run(args, LogLedger(args.ledger), token))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
