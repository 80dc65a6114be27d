"""Request heads bounded by the node itself, under uvicorn.

HAProxy refuses a head over its buffer, but the nodes' ports are reachable without it, and
uvicorn's httptools protocol reads a head of any size (8 MB, 50 MB, 100,000 fields were all
parsed): two dozen such requests straight to the nodes kept them busy enough to fail
HAProxy's health checks, and a bystander going through HAProxy got 503s. So a node counts
the bytes and fields of every head as they arrive and answers ``431`` and closes once either
is over its limit, before the parser has buffered the rest.

- httptools (uvicorn's default when it is installed, and the node's choice for speed):
  ``BoundedHttpToolsProtocol`` below, chosen by ``http_protocol``;
- h11 (when httptools is missing): uvicorn's ``h11_max_incomplete_event_size`` bounds the
  head's bytes (h11 answers 400); the field count is then checked by the request guard
  (stack.web.routes.common.RequestGuard), on a head already bounded in bytes.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["HEAD_TOO_LARGE", "http_protocol", "uvicorn_limits"]

HEAD_TOO_LARGE = b"request header fields too large"


def _reply_431(transport: Any) -> None:
    transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(HEAD_TOO_LARGE), HEAD_TOO_LARGE))
    transport.close()


class _HeadTooLarge(Exception):
    """Raised from a parser callback; httptools wraps it in HttpParserCallbackError."""


def _bounded_httptools_class() -> type | None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools not installed: h11 serves, bounded by uvicorn's own option
        return None

    class BoundedHttpToolsProtocol(HttpToolsProtocol):  # type: ignore[misc, valid-type]
        """uvicorn's httptools protocol with a byte and field budget per request head."""

        max_head_bytes = 32768
        max_headers = 128

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            self._head_open, self._head_bytes, self._fields, self._refused = True, 0, 0, False
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._head_open:
                # Counts what arrived while the head is incomplete: the parser buffers a field
                # until its end, so waiting for callbacks alone would let a 50 MB field in.
                self._head_bytes += len(data)
            try:
                super().data_received(data)
            except _HeadTooLarge:
                self._refuse()
                return
            if self._head_open and self._head_bytes > self.max_head_bytes and not self._refused:
                self._refuse()

        def send_400_response(self, msg: str) -> None:
            if self._refused:  # a callback refused the head: the answer is 431, sent once
                _reply_431(self.transport)
                return
            super().send_400_response(msg)

        def on_message_begin(self) -> None:
            self._head_open, self._fields = True, 0
            super().on_message_begin()

        def on_header(self, name: bytes, value: bytes) -> None:
            self._fields += 1
            if self._fields > self.max_headers:
                self._refused = True
                raise _HeadTooLarge()
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._head_open, self._head_bytes = False, 0
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._head_open = True  # what arrives next is the head of the next (pipelined) request
            super().on_message_complete()

        def _refuse(self) -> None:
            self._refused = True
            _reply_431(self.transport)

    return BoundedHttpToolsProtocol


@functools.cache
def _httptools_base() -> type | None:
    return _bounded_httptools_class()


def http_protocol(max_head_bytes: int, max_headers: int) -> type | str:
    """The ``http=`` of uvicorn.Config: the bounded httptools protocol, or "h11"."""
    base = _httptools_base()
    if base is None:
        return "h11"
    return type("BoundedHttpTools", (base,), {"max_head_bytes": max_head_bytes, "max_headers": max_headers})


def uvicorn_limits(max_head_bytes: int, max_headers: int) -> dict[str, Any]:
    """uvicorn.Config options that bound every head, whichever HTTP implementation serves."""
    return {"http": http_protocol(max_head_bytes, max_headers), "h11_max_incomplete_event_size": max_head_bytes}
