"""``<run_dir>/manifest.json``: what a run started, where, and whether it is ready.

Written atomically (temp file + rename) so that ``proctor status``/``down`` never
read half a file, and rewritten whenever a pid changes (restart, scale).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from stack.embedded import StackError

__all__ = [
    "MANIFEST_NAME",
    "write_manifest",
    "read_manifest",
    "package_versions",
]

MANIFEST_NAME = "manifest.json"
_PACKAGES = ("fastapi", "uvicorn", "redis", "rq", "SQLAlchemy", "httpx", "starlette", "pydantic")


def write_manifest(run_dir: Path, data: dict[str, Any]) -> Path:
    path = run_dir / MANIFEST_NAME
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".json", dir=run_dir)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST_NAME
    try:
        with open(path) as fh:
            data: dict[str, Any] = json.load(fh)
    except FileNotFoundError:
        raise StackError(f"no manifest at {path}: is {run_dir} a run folder (proctor up)?") from None
    except json.JSONDecodeError as exc:
        raise StackError(f"{path} is not valid JSON: {exc}") from None
    return data


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
