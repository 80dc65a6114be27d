"""Process entry and embedding helpers: the HTTP/1.1 listener around :class:`~.api.Api`.

A hand-written HTTP/1.1 server (asyncio streams) gives exact control of status lines
and headers (empty 405, 204 without Content-Type, Go's error content types) that an
ASGI stack would otherwise add to.  The API is tiny, so keep-alive + Content-Length
(+ chunked request bodies for completeness) is all it needs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any, NoReturn

from .api import VERSION, Api, BadBody, Response, decode, error_response
from .auth import CREDENTIAL_ENV, ApiCredential, CredentialError

__all__ = ["MAX_BODY", "FaultProxyServer", "ThreadedFaultProxy", "start_faultproxy_process",
           "stop_faultproxy_process", "main"]

MAX_BODY = 1 << 20
"""Largest request body read, in bytes.  Real Toxiproxy has no limit; API bodies are a
few hundred bytes (a /populate of 1000 proxies is ~100 kB).  A larger Content-Length is
refused before any of the body is read, and a chunked body as soon as it passes this."""

_IDLE_TIMEOUT = 60.0  # Toxiproxy: idle 60 s, read 15 s
_READ_TIMEOUT = 15.0
_RST_AVOIDANCE = 0.5  # as Go's server: FIN, wait, close, so the client reads the answer
_REASONS = {100: "Continue", 200: "OK", 201: "Created", 204: "No Content",
            400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Request Entity Too Large",
            500: "Internal Server Error"}


class _TooLarge(Exception):
    """The request body is over :data:`MAX_BODY`; answered with 413, then the close."""


def _log(msg: str, **fields: Any) -> None:
    # JSON lines on stdout, like Toxiproxy's zerolog output.
    print(json.dumps({"level": "info", "msg": msg, **fields}), flush=True)


class FaultProxyServer:
    """The Toxiproxy-compatible API server plus its proxies, in the running loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474, seed: int | None = None,
                 credential: str | None = None) -> None:
        self.host = host
        self.port = port
        self.credential = ApiCredential(credential)  # None: no check, as Toxiproxy (chaos/faultproxy/auth.py)
        # Unseeded runs still get one recorded seed, so any run can be replayed.
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(6), "big")
        self.api = Api(str(self.seed))
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """The API's URL, with the credential in it when one is set (clients send it as Basic)."""
        userinfo = f"{self.credential.text}@" if self.credential.required else ""
        return f"http://{userinfo}{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, self.host, self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def populate(self, items: list[dict[str, Any]]) -> None:
        """Apply a ``/populate`` array (``--config``); raises RuntimeError on failure."""
        resp = await self.api.handle("POST", "/populate", {}, json.dumps(items).encode())
        if resp.status != 201:
            raise RuntimeError(resp.body.decode(errors="replace"))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in list(self._clients):
            task.cancel()
        if self._clients:
            await asyncio.gather(*self._clients, return_exceptions=True)
        await self.api.shutdown()
        for _ in range(3):  # let the transports' close callbacks run (sockets really closed)
            await asyncio.sleep(0)

    # --- HTTP/1.1 ------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError):
            pass
        except asyncio.CancelledError:
            pass  # server stopping
        finally:
            self._clients.discard(task)
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> bool:
        line = await asyncio.wait_for(reader.readline(), _IDLE_TIMEOUT)
        if not line:
            return False
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._send(writer, Response(400, b"400 Bad Request"), close=True)
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        while True:
            raw = await asyncio.wait_for(reader.readline(), _READ_TIMEOUT)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            body = await self._body(reader, headers, writer)
        except _TooLarge:
            await self._refuse_body(writer)
            return False
        conn = headers.get("connection", "").lower()
        close = conn == "close" or (version == "HTTP/1.0" and conn != "keep-alive")
        path = target.split("?", 1)[0]
        if self.credential.allows(headers):
            resp = await self.api.handle(method, path, headers, body)
        else:
            resp = error_response(401, "missing or wrong API credential")
            resp.headers.append(("WWW-Authenticate", 'Basic realm="faultproxy"'))
        await self._send(writer, resp, close=close, head=method == "HEAD")
        return not close

    async def _body(self, reader: asyncio.StreamReader, headers: dict[str, str],
                    writer: asyncio.StreamWriter) -> bytes:
        length = int(headers.get("content-length", "0") or "0")
        if length > MAX_BODY:
            raise _TooLarge()  # before 100-continue: the client need not send it at all
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    raise _TooLarge()  # refused before the chunk is read
                out += await reader.readexactly(size)
                await reader.readline()
        if length < 0:
            raise ValueError("bad content-length")
        return await asyncio.wait_for(reader.readexactly(length), _READ_TIMEOUT) if length else b""

    async def _refuse_body(self, writer: asyncio.StreamWriter) -> None:
        resp = error_response(413, f"request body too large: the limit is {MAX_BODY} bytes")
        await self._send(writer, resp, close=True)
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.sleep(_RST_AVOIDANCE)  # unread body bytes make close() send an RST

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, resp: Response, close: bool,
                    head: bool = False) -> None:
        lines = [f"HTTP/1.1 {resp.status} {_REASONS.get(resp.status, '')}"]
        lines += [f"{k}: {v}" for k, v in resp.headers]
        lines.append(f"Date: {formatdate(usegmt=True)}")
        if resp.status != 204:
            lines.append(f"Content-Length: {len(resp.body)}")
        if close:
            lines.append("Connection: close")
        head_bytes = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        writer.write(head_bytes if head else head_bytes + resp.body)
        await writer.drain()


class ThreadedFaultProxy:
    """Run a :class:`FaultProxyServer` on its own loop in a daemon thread (sync tests)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, seed: int | None = None,
                 credential: str | None = None) -> None:
        self.server = FaultProxyServer(host, port, seed, credential)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faultproxy", daemon=True)
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> "ThreadedFaultProxy":
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
            pending = asyncio.all_tasks(self._loop)  # as asyncio.run does: no orphan tasks
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as exc:  # noqa: BLE001 - surfaced to start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        await self._stop.wait()
        await self.server.stop()

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> "ThreadedFaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_faultproxy_process(port: int = 0, host: str = "127.0.0.1", seed: int | None = None,
                             config: str | None = None, log_path: str | None = None,
                             timeout: float = 10.0, credential: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m chaos.faultproxy`` and wait until ``GET /version`` answers; the URL
    returned carries ``credential`` (``user:password``) when one is given."""
    port = port or _free_port(host)
    cmd = [sys.executable, "-m", "chaos.faultproxy", "--host", host, "--port", str(port)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if config is not None:
        cmd += ["--config", config]
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        env = {k: v for k, v in os.environ.items() if k != CREDENTIAL_ENV}
        if credential:
            env[CREDENTIAL_ENV] = credential  # the environment, not argv: /proc/*/cmdline is world-readable
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=str(Path(__file__).resolve().parents[2]))
    finally:
        if log_path:
            log.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"faultproxy exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection(host, port, timeout=1)
            try:
                conn.request("GET", "/version", headers=_basic(credential))
                if conn.getresponse().status == 200:
                    return proc, f"http://{credential + '@' if credential else ''}{host}:{port}"
            finally:
                conn.close()
        time.sleep(0.05)
    stop_faultproxy_process(proc)
    raise RuntimeError("faultproxy did not answer /version in time")


def _basic(credential: str | None) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(credential.encode()).decode()} if credential else {}


def stop_faultproxy_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> int:
    """SIGTERM by pid (graceful stop), SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return int(proc.returncode)


async def _serve(args: argparse.Namespace, credential: str | None) -> int:
    server = FaultProxyServer(args.host, args.port, args.seed, credential)
    await server.start()
    if args.config:
        try:
            await server.populate(decode(Path(args.config).read_bytes()))
        except (OSError, BadBody, RuntimeError) as exc:
            print(f"faultproxy: --config {args.config}: {exc}", file=sys.stderr)
            await server.stop()
            return 1
    _log("Starting Toxiproxy-compatible HTTP server", host=args.host, port=server.port,
         seed=server.seed, version=VERSION, api_credential=server.credential.required)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    _log("Shutting down")
    await server.stop()
    return 0


class _OneLineParser(argparse.ArgumentParser):
    """A bad option is one line and exit 2, like every proctor command (stack/cli_args.py; the fault
    proxy imports only the standard library, so it keeps its own three lines)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def port_number(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(prog="proctor faultproxy",
                            description=f"Toxiproxy {VERSION}-compatible fault proxy",
                            epilog=f"{CREDENTIAL_ENV}=user:password in the environment: the API wants "
                                   "that HTTP Basic credential on every request (unset: none, as Toxiproxy)")
    parser.add_argument("--host", default="127.0.0.1", help="address of the HTTP API (default 127.0.0.1)")
    parser.add_argument("--port", type=port_number, default=8474, help="port of the HTTP API (default 8474; 0: any free)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for jitter, toxicity and slicer (reproducible runs)")
    parser.add_argument("--config", default=None, help="a /populate JSON array applied at start")
    args = parser.parse_args(argv)
    credential = os.environ.get(CREDENTIAL_ENV) or None
    try:
        ApiCredential(credential)
    except CredentialError as exc:
        print(f"faultproxy: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(args, credential))
    except OSError as exc:
        print(f"faultproxy: {exc}", file=sys.stderr)
        return 1
