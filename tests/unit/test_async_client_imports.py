"""The harness's async HTTP client imports nothing per request (issue #22 part 4).

httpcore 1.0 asks ``import sniffio`` on every pooled request (``current_async_library``), and anyio
(4.16 here) no longer requires sniffio, so without it installed each request made failed imports: a
search of every ``sys.path`` entry, about a quarter of the client's CPU (2.6-3.5 against 1.6-2.1 CPU
ms per request, docs/dependencies.md). ``sniffio`` is a base dependency for that reason; this test
fails when it is missing again, or when any other per-request import appears.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import sys

import httpx

REQUESTS = 5


class _ImportCounter(importlib.abc.MetaPathFinder):
    """Sees every import that ``sys.modules`` did not answer (it is asked first and answers nothing)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        self.names.append(fullname)
        return None


async def _serve_json(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    body = b'{"status":"ok"}'
    while await _read_request(reader):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                     % (len(body), body))
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> bool:
    try:
        await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    return True


async def _imports_during_requests() -> list[str]:
    handlers: list[asyncio.Task] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        await _serve_json(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    counter = _ImportCounter()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http:
            (await http.get("/warm-up")).json()  # first use may import lazily, once
            sys.meta_path.insert(0, counter)
            try:
                for _ in range(REQUESTS):
                    assert (await http.get("/")).json() == {"status": "ok"}
            finally:
                sys.meta_path.remove(counter)
        await asyncio.gather(*handlers)  # the client closed its connection: each handler read the end
    finally:
        server.close()
        await server.wait_closed()
    return counter.names


def test_pooled_requests_import_nothing() -> None:
    assert asyncio.run(_imports_during_requests()) == []


def test_the_counter_sees_a_failed_import() -> None:
    """The probe itself: an import that fails is seen each time it is tried."""
    counter = _ImportCounter()
    sys.meta_path.insert(0, counter)
    try:
        for _ in range(2):
            try:
                __import__("proctor_no_such_module_for_the_probe")
            except ImportError:
                pass
    finally:
        sys.meta_path.remove(counter)
    assert counter.names == ["proctor_no_such_module_for_the_probe"] * 2
