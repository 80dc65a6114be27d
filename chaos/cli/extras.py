"""Which optional part of Proctor (a pip extra) a missing module belongs to.

The base install is the harness and the checkers; the reference stack, the Locust ramp
and the PostgreSQL ledger are extras (``pyproject.toml``).  A command that needs one
the user did not install should say which extra, not end in a ModuleNotFoundError.
"""

from __future__ import annotations

__all__ = ["EXTRA_OF_MODULE", "missing_extra_hint"]

EXTRA_OF_MODULE: dict[str, str] = {
    # Top-level import name -> extra (tests/unit/test_dependencies.py checks it against
    # pyproject.toml, so a dependency moved between extras moves here too).
    "fastapi": "stack",
    "starlette": "stack",
    "pydantic": "stack",
    "uvicorn": "stack",
    "rq": "stack",
    "redis": "stack",
    "sqlalchemy": "stack",
    "limits": "stack",
    "prometheus_client": "stack",
    "locust": "load",
    "psycopg": "postgres",
    "docker": "compose",
}


def missing_extra_hint(exc: ModuleNotFoundError, command: str) -> str | None:
    """A one-line fix for ``exc`` if the module is an extra's; None for anything else."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return (f"proctor {command}: needs the '{extra}' extra (module {top!r} is missing): "
            f"pip install 'proctor[{extra}]'")
