"""One way for every ``proctor`` subcommand to refuse a bad value: one line, exit 2.

argparse's own ``error`` prints the whole usage block before the message; a newcomer then
reads a wall of options and misses which one was wrong. ``CliParser`` prints only
``proctor CMD: argument --opt: RULE, got VALUE (proctor CMD --help)`` and exits 2 (argparse's
usage code, docs/cli.md's exit-code table). The value types below name their rule, so the
message says what would have been accepted. Standard library only: the stack's commands
and the harness's share it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

__all__ = [
    "EXIT_USAGE",
    "CliParser",
    "csv_positive_floats",
    "existing_dir",
    "fraction",
    "non_negative_int",
    "port_number",
    "positive_float",
    "positive_int",
    "usage_error",
]

EXIT_USAGE = 2


class CliParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the option and its rule."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def usage_error(prog: str, message: str) -> int:
    """The same one line for a rule checked after parsing; returns the exit code to return."""
    print(f"{prog}: {message} (see {prog} --help)", file=sys.stderr)
    return EXIT_USAGE


def _number(text: str, kind: type, rule: str) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{rule}, got {text!r}") from None


def positive_int(text: str) -> int:
    value = int(_number(text, int, "must be a whole number >= 1"))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = int(_number(text, int, "must be a whole number >= 0"))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = float(_number(text, float, "must be a number > 0"))
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    value = float(_number(text, float, "must be a number from 0 to 1"))
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text!r}")
    return value


def csv_positive_floats(text: str) -> str:
    """``25,50,100``: checked here, passed on as the text (Locust's option parses it again)."""
    parts = text.split(",")
    try:
        ok = all(float(part) > 0 for part in parts)
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"must be numbers > 0 separated by commas (e.g. 25,50,100), got {text!r}")
    return text


def existing_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {text!r}")
    return path


def port_number(text: str) -> int:
    value = int(_number(text, int, "must be a port number from 0 to 65535"))
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text!r}")
    return value
