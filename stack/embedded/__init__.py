"""Embedded runner: the whole reference stack as supervised local processes on 127.0.0.1.

``from stack.embedded import EmbeddedStack, StackSpec``. The heavy names are loaded
lazily so that ``python -m stack.embedded.watchdog`` starts without importing
SQLAlchemy, redis-py and httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stack.deploy import StackError

__all__ = ["EmbeddedStack", "StackSpec", "StackError"]




if TYPE_CHECKING:
    from stack.embedded.stack import EmbeddedStack, StackSpec


def __getattr__(name: str) -> Any:
    # PEP 562 lazy export: the submodules import redis/httpx/SQLAlchemy.
    if name in ("EmbeddedStack", "StackSpec"):
        from stack.embedded import stack

        return getattr(stack, name)
    raise AttributeError(f"module 'stack.embedded' has no attribute {name!r}")
