"""Go ``encoding/json`` as Toxiproxy 2.12.0 uses it: ``json.NewDecoder(body).Decode(&v)``.

Clients match on the error texts, so they are Go's, byte for byte:

* syntax errors come from Go's scanner state machine (``invalid character 'o' in literal
  null (expecting 'u')``), reported at the first bad byte; a body that ends inside a
  value is ``unexpected EOF`` and an empty one ``EOF``;
* only the first value is read; what follows it is never looked at (``Decoder.Decode``);
* nesting deeper than Go's ``maxNestingDepth`` (10 000) is ``invalid character '['
  exceeded max depth``.  Shallower but deep values are valid JSON to Go, and must not
  hit Python's recursion limit here: the handlers only look a few levels down, so
  containers below :data:`_KEEP_DEPTH` are replaced by empty ones of the same kind;
* type errors (``json: cannot unmarshal …``) are built by :func:`want` and :func:`kind`.

Valid bodies take Python's C decoder; the byte-level scanner only runs to explain an
error, for deep bodies, and for top-level scalars (where Python and Go stop differently).
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any

__all__ = ["BadBody", "GoNumber", "MAX_DEPTH", "decode", "kind", "field", "want", "want_object",
           "dumps", "float32", "float32_json"]

MAX_DEPTH = 10_000  # Go's maxNestingDepth
_KEEP_DEPTH = 8  # handlers read at most array > object > attributes > value


class BadBody(Exception):
    """Carries the Go-style message that follows ``bad request body: ``."""


class GoNumber(float):
    """A JSON number with a fraction or exponent; keeps its literal for messages."""

    literal: str

    def __new__(cls, text: str) -> "GoNumber":
        obj = super().__new__(cls, text)
        obj.literal = text
        return obj


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # Python accepts NaN/Infinity; Go does not


_DECODER = json.JSONDecoder(parse_float=GoNumber, parse_constant=_no_constant)
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def decode(body: bytes) -> Any:
    """The first JSON value of ``body``, as Go's ``Decoder.Decode`` reads it."""
    start = len(body) - len(body.lstrip(b" \t\r\n"))
    if start == len(body):
        raise BadBody("EOF")
    if body[start] in b"[{" and not _SURROGATE_ESCAPE.search(body):
        try:
            text = body.decode("utf-8", errors="replace")
            return _DECODER.raw_decode(text, start)[0]  # fast path: a valid container
        except (ValueError, RecursionError):
            pass  # explained (or pruned) by the scanner below
    end, deep = _Scanner(body, start).run()
    return _clean(json.loads(_pruned(body, start, end, deep).decode("utf-8", "replace"),
                             parse_float=GoNumber))


def _pruned(body: bytes, start: int, end: int, deep: list[tuple[int, int]]) -> bytes:
    """``body[start:end]`` with each too-deep container replaced by an empty one."""
    out, pos = bytearray(), start
    for open_at, close_at in deep:
        out += body[pos:open_at] + (b"[]" if body[open_at] == 0x5B else b"{}")
        pos = close_at + 1
    return bytes(out + body[pos:end])


def _clean(value: Any) -> Any:
    """(Shallow after pruning, so recursion is safe.)  Go turns lone UTF-16 surrogate escapes into U+FFFD; Python keeps them (unencodable)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


def _quote_char(c: int) -> str:
    """Go's ``quoteChar``: the byte as a rune, quoted like a Go character literal."""
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    ch = chr(c)
    named = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
             "\v": "\\v", "\\": "\\\\"}
    if ch in named:
        return f"'{named[ch]}'"
    if c < 0x20 or c == 0x7F:
        return f"'\\x{c:02x}'"
    if 0x80 <= c <= 0xA0 or c == 0xAD:  # not printable for strconv.Quote
        return f"'\\u{c:04x}'"
    return f"'{ch}'"


_WS = re.compile(rb"[ \t\r\n]*")
_STRING_RUN = re.compile(rb'[^"\\\x00-\x1f]*')
_DIGITS = re.compile(rb"[0-9]*")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = frozenset(b'bfnrt\\/"')
_LITERALS = {0x74: b"true", 0x66: b"false", 0x6E: b"null"}

_VALUE, _FIRST, _KEY, _END = range(4)  # scanner states: what may come next


class _Scanner:
    """Go's scanner over bytes, as a loop (no recursion): the first value's end offset
    and the too-deep containers, or Go's error text."""

    def __init__(self, body: bytes, pos: int) -> None:
        self.body = body
        self.pos = pos
        self.stack: list[int] = []  # offsets of the open containers
        self.deep: list[tuple[int, int]] = []  # containers opened at _KEEP_DEPTH + 1

    def run(self) -> tuple[int, list[tuple[int, int]]]:
        state = _VALUE
        while True:
            if state == _VALUE:
                state = self.value()
            elif state == _FIRST:
                state = self.first()
            elif state == _KEY:
                self.key()
                state = _VALUE
            elif not self.stack:
                return self.pos, self.deep
            else:
                state = self.after_value()

    # --- helpers --------------------------------------------------------------------
    def peek(self) -> int:
        if self.pos >= len(self.body):
            raise BadBody("unexpected EOF")
        return self.body[self.pos]

    def fail(self, context: str) -> BadBody:
        return BadBody(f"invalid character {_quote_char(self.peek())} {context}")

    def skip(self, pattern: re.Pattern[bytes]) -> None:
        match = pattern.match(self.body, self.pos)
        assert match is not None  # every pattern here also matches the empty string
        self.pos = match.end()

    def in_array(self) -> bool:
        return self.body[self.stack[-1]] == 0x5B

    # --- states ---------------------------------------------------------------------
    def value(self) -> int:
        """Go's stateBeginValue: a scalar (then _END) or an opened container (_FIRST)."""
        self.skip(_WS)
        c = self.peek()
        if c in (0x5B, 0x7B):  # [ {
            if len(self.stack) >= MAX_DEPTH:
                raise self.fail("exceeded max depth")
            self.stack.append(self.pos)
            self.pos += 1
            return _FIRST
        if c == 0x22:
            self.string()
        elif c == 0x2D or 0x30 <= c <= 0x39:
            self.number()
        elif c in _LITERALS:
            self.literal(_LITERALS[c])
        else:
            raise self.fail("looking for beginning of value")
        return _END

    def first(self) -> int:
        """Just after ``[`` or ``{``: the closing bracket (empty) or the first item."""
        self.skip(_WS)
        if self.peek() == self.body[self.stack[-1]] + 2:  # ] is [ + 2, } is { + 2
            self.close_container()
            return _END
        return _VALUE if self.in_array() else _KEY

    def close_container(self) -> None:
        open_at = self.stack.pop()
        if len(self.stack) == _KEEP_DEPTH:
            self.deep.append((open_at, self.pos))
        self.pos += 1

    def key(self) -> None:
        self.skip(_WS)
        if self.peek() != 0x22:
            raise self.fail("looking for beginning of object key string")
        self.string()
        self.skip(_WS)
        if self.peek() != 0x3A:
            raise self.fail("after object key")
        self.pos += 1

    def after_value(self) -> int:
        """Go's stateEndValue inside a container: a comma or the closing bracket."""
        self.skip(_WS)
        c = self.peek()
        in_array = self.in_array()
        if c == 0x2C:
            self.pos += 1
            return _VALUE if in_array else _KEY
        if c == (0x5D if in_array else 0x7D):
            self.close_container()
            return _END
        raise self.fail("after array element" if in_array else "after object key:value pair")

    # --- scalars --------------------------------------------------------------------
    def string(self) -> None:
        self.pos += 1
        while True:
            self.skip(_STRING_RUN)
            c = self.peek()
            if c == 0x22:
                self.pos += 1
                return
            if c != 0x5C:
                raise self.fail("in string literal")  # a control character
            self.pos += 1
            self.escape()

    def escape(self) -> None:
        c = self.peek()
        if c in _ESCAPES:
            self.pos += 1
            return
        if c != 0x75:
            raise self.fail("in string escape code")
        self.pos += 1
        for _ in range(4):
            if self.peek() not in _HEX:
                raise self.fail("in \\u hexadecimal character escape")
            self.pos += 1

    def number(self) -> None:
        if self.peek() == 0x2D:
            self.pos += 1
            if not 0x30 <= self.peek() <= 0x39:
                raise self.fail("in numeric literal")
        if self.body[self.pos] == 0x30:
            self.pos += 1
        else:
            self.skip(_DIGITS)
        if self.next_is(b"."):
            self.pos += 1
            self.digits("after decimal point in numeric literal")
        if self.next_is(b"eE"):
            self.pos += 1
            if self.next_is(b"+-"):
                self.pos += 1
            self.digits("in exponent of numeric literal")

    def next_is(self, chars: bytes) -> bool:
        # A number may end at EOF (Go's Decoder feeds a space there), so no peek().
        return self.pos < len(self.body) and self.body[self.pos] in chars

    def digits(self, context: str) -> None:
        if not 0x30 <= self.peek() <= 0x39:
            raise self.fail(context)
        self.skip(_DIGITS)

    def literal(self, word: bytes) -> None:
        name = word.decode()
        for expected in word[1:]:
            self.pos += 1
            if self.peek() != expected:
                raise self.fail(f"in literal {name} (expecting '{chr(expected)}')")
        self.pos += 1


def kind(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    return {bool: "bool", str: "string", list: "array"}.get(type(value), "object")


def field(obj: dict[str, Any], key: str) -> Any:
    """Struct field ``key``: exact match, else case-insensitive (last wins), as in Go."""
    if key in obj:
        return obj[key]
    return next((v for k, v in reversed(list(obj.items())) if k.lower() == key), None)


_INT64 = (-(1 << 63), (1 << 63) - 1)
_FLOAT32_MAX = 3.4028234663852886e38
_GO_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "bool": (bool,),
                                          "float32": (int, float), "int64": (int,)}


def want(obj: dict[str, Any], key: str, path: str, go_type: str) -> Any:
    """``obj[key]`` if it decodes into ``go_type``; None if absent or null."""
    value = field(obj, key)
    ok = _GO_TYPES[go_type]
    if value is None or (isinstance(value, ok) and (go_type == "bool" or not isinstance(value, bool))
                         and not (go_type == "int64" and not _INT64[0] <= value <= _INT64[1])
                         and not (go_type == "float32" and abs(value) > _FLOAT32_MAX)):
        return value
    what = kind(value)
    if what == "number" and go_type in ("int64", "float32"):
        what = f"number {getattr(value, 'literal', value)}"
    raise BadBody(f"json: cannot unmarshal {what} into Go struct field {path} of type {go_type}")


def want_object(value: Any, go_type: str) -> dict[str, Any]:
    """A decoded body that Go unmarshals into a struct of ``go_type``."""
    if value is None:
        return {}  # Go decodes null into a struct as a no-op
    if not isinstance(value, dict):
        raise BadBody(f"json: cannot unmarshal {kind(value)} into Go value of type {go_type}")
    return value


def dumps(obj: Any) -> bytes:
    """Compact JSON escaped like Go's ``json.Marshal`` (HTML-safe, U+2028/9 escaped)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    for raw, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                     ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, esc)
    return text.encode("utf-8")


def float32(value: float) -> float:
    """Round to float32, like Toxiproxy's ``toxicity`` field."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def float32_json(value: float) -> int | float:
    """Shortest float32 spelling (Go prints ``0.1``, not ``0.10000000149011612``)."""
    if value.is_integer() and abs(value) < 1e21:
        return int(value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if float32(float(text)) == value:
            return float(text)
    return value
