"""How a setting is declared: once, as a dataclass field with its variable, parser and help.

``setting("PROCTOR_X", default, parse, help=...)`` is the whole declaration. ``stack.config``
(``Settings``) and ``stack.controls`` (``Controls``) declare their fields this way, and everything
else derives from the fields: ``load_settings`` (variable -> parser -> value), ``to_env`` (value ->
variable), ``ENV_NAMES``, and the settings table in docs/architecture.md, which
tests/unit/test_settings_table.py checks against :func:`declared`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Iterator, Mapping

__all__ = [
    "Declared", "Parser", "SettingsError", "declared", "env_value", "one_of", "parse_bool", "parse_env", "parse_exam_window",
    "parse_exams", "parse_networks", "parse_table", "parse_non_negative_float", "parse_positive_float", "parse_positive_int",
    "parse_rate", "setting",
]

Parser = Callable[[str, str], Any]
"""``parse(variable, raw)`` -> the value, or SettingsError naming the variable."""


def setting(env: str, default: Any = MISSING, parse: Parser | None = None, *,
            factory: Callable[[], Any] | None = None, help: str) -> Any:
    """A dataclass field that knows its environment variable, its parser (None: the raw string)
    and the help line the docs' settings table shows."""
    metadata = {"env": env, "parse": parse, "help": help}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Declared:
    """One declared setting, as the docs table shows it."""

    name: str
    env: str
    parse: Parser | None
    help: str


def declared(cls: type) -> Iterator[Declared]:
    """The settings ``cls`` declares with :func:`setting`, in declaration order."""
    for f in fields(cls):
        if "env" in f.metadata:
            yield Declared(f.name, f.metadata["env"], f.metadata["parse"], f.metadata["help"])


def parse_env(cls: type, environ: Mapping[str, str]) -> dict[str, Any]:
    """Field -> parsed value for each of ``cls``'s variables set (and not empty) in ``environ``.
    ``DATABASE_URL`` may be set empty: it then means the SQLite ledger in the run folder."""
    values: dict[str, Any] = {}
    for item in declared(cls):
        raw = environ.get(item.env)
        if raw is None or raw == "" and item.env != "DATABASE_URL":
            continue
        values[item.name] = item.parse(item.env, raw) if item.parse else raw
    return values


def env_value(value: Any) -> str:
    """A value as its variable spells it: on/off, ``CODE:N,...``, comma lists, or ``str``."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Mapping):
        return ",".join(f"{code}:{count}" for code, count in value.items())
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


class SettingsError(ValueError):
    """An environment variable holds a value the stack cannot use; names the variable."""


def parse_bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}={raw!r}: expected one of on/off, true/false, 1/0")


def parse_float(name: str, raw: str, *, allow_zero: bool) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a number") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise SettingsError(f"{name}={raw!r}: must be {'0 or more' if allow_zero else 'greater than 0'}")
    return value


def parse_positive_float(name: str, raw: str) -> float:
    return parse_float(name, raw, allow_zero=False)


def parse_non_negative_float(name: str, raw: str) -> float:
    return parse_float(name, raw, allow_zero=True)


def parse_positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a whole number") from None
    if value < 1:
        raise SettingsError(f"{name}={raw!r}: must be at least 1")
    return value


def parse_table(defaults: Mapping[str, str], choices: tuple[str, ...]) -> Callable[[str, str], dict[str, str]]:
    """A parser for ``KEY:VALUE,...`` overriding some entries of ``defaults`` (keys and values checked);
    the value is the whole table, so ``env_value`` spells it back in full."""

    def parse(name: str, raw: str) -> dict[str, str]:
        table = dict(defaults)
        for item in filter(None, (part.strip().lower() for part in raw.split(","))):
            key, sep, value = (part.strip() for part in item.partition(":"))
            if not sep or key not in defaults or value not in choices:
                raise SettingsError(f"{name}={raw!r}: each entry is KEY:VALUE with KEY one of {', '.join(defaults)} "
                                    f"and VALUE one of {', '.join(choices)}")
            table[key] = value
        return table

    return parse


def parse_networks(name: str, raw: str) -> tuple[str, ...]:
    """``127.0.0.1/32,10.0.0.0/8`` -> the networks, each checked (a bare address is a /32 or /128)."""
    networks = tuple(part.strip() for part in raw.split(",") if part.strip())
    for network in networks:
        try:
            ipaddress.ip_network(network)
        except ValueError as exc:
            raise SettingsError(f"{name}={raw!r}: {exc}") from None
    if not networks:
        raise SettingsError(f"{name}={raw!r}: name at least one network, e.g. 127.0.0.1/32")
    return networks


def parse_rate(name: str, raw: str) -> str:
    """A limit in the ``limits`` notation: ``3000/minute``, ``50 per second``."""
    from limits import parse

    try:
        parse(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a rate such as 3000/minute") from None
    return raw


def one_of(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    """A parser for a setting that names one of ``choices`` (case and surrounding blanks ignored)."""

    def parse(name: str, raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise SettingsError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
        return value

    return parse


def parse_exam_window(name: str, raw: str) -> str:
    """``open-ended`` (stated, never implied by an empty value) or the window's length in seconds."""
    value = raw.strip().lower()
    if value == "open-ended":
        return value
    try:
        seconds = float(value)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected open-ended or the window's length in seconds") from None
    if not seconds > 0:
        raise SettingsError(f"{name}={raw!r}: a window lasts more than 0 seconds")
    return value


def parse_exams(name: str, raw: str) -> dict[str, int]:
    """``NOVA-101:20,NOVA-102:10`` -> {code: question count}."""
    exams: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        code, sep, count = item.partition(":")
        if not sep or not code:
            raise SettingsError(f"{name}={raw!r}: each exam is CODE:QUESTIONS, e.g. NOVA-101:20")
        exams[code] = parse_positive_int(name, count)
    if not exams:
        raise SettingsError(f"{name}={raw!r}: name at least one exam, e.g. NOVA-101:20")
    return exams
