"""Find the server binaries the stack needs, with an install hint when one is missing."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import dataclass

from stack.embedded import StackError

__all__ = ["Binary", "BinaryNotFound", "find_valkey", "find_haproxy", "find_sentinel", "VALKEY_HINT", "HAPROXY_HINT",
           "SENTINEL_HINT"]

log = logging.getLogger(__name__)

VALKEY_HINT = "apt-get install -t bookworm-backports valkey-server"
HAPROXY_HINT = "apt-get install haproxy"
SENTINEL_HINT = "apt-get install -t bookworm-backports valkey-sentinel"
_MIN_REDIS_MAJOR = 7  # TLS flags and BLMOVE semantics the stack relies on
SBIN_FALLBACK = "/usr/sbin:/usr/local/sbin"
"""haproxy lives in /usr/sbin on Debian, which is not on every user's PATH."""


class BinaryNotFound(StackError):
    """A required executable is not on PATH; the message names the package to install."""


@dataclass(frozen=True)
class Binary:
    name: str  # "valkey-server", "redis-server", "haproxy"
    path: str
    version: str


def _version_output(path: str, flag: str) -> str:
    try:
        done = subprocess.run([path, flag], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BinaryNotFound(f"{path} {flag} failed: {exc}") from exc
    return done.stdout + done.stderr


def _server_version(path: str) -> str:
    # "Valkey server v=8.0.1 sha=..." / "Redis server v=7.2.4 sha=..."
    match = re.search(r"v=(\d+(?:\.\d+)*)", _version_output(path, "--version"))
    return match.group(1) if match else "unknown"


def find_valkey() -> Binary:
    """valkey-server; redis-server >= 7 only when valkey is absent (with a warning)."""
    path = shutil.which("valkey-server")
    if path:
        return Binary("valkey-server", path, _server_version(path))
    redis = shutil.which("redis-server")
    if redis:
        version = _server_version(redis)
        major = int(version.split(".")[0]) if version[:1].isdigit() else 0
        if major >= _MIN_REDIS_MAJOR:
            log.warning("valkey-server not found; falling back to %s %s (install: %s)", redis, version, VALKEY_HINT)
            return Binary("redis-server", redis, version)
        raise BinaryNotFound(
            f"valkey-server not found and {redis} is version {version} (< {_MIN_REDIS_MAJOR}): {VALKEY_HINT}"
        )
    raise BinaryNotFound(f"valkey-server not found: {VALKEY_HINT}")


def find_haproxy() -> Binary:
    path = shutil.which("haproxy") or (shutil.which("haproxy", path=SBIN_FALLBACK) if SBIN_FALLBACK else None)
    if not path:
        raise BinaryNotFound(f"haproxy not found: {HAPROXY_HINT}")
    match = re.search(r"HA-?Proxy version (\S+)", _version_output(path, "-v"))
    return Binary("haproxy", path, match.group(1) if match else "unknown")


def find_sentinel() -> Binary:
    """valkey-sentinel (package valkey-sentinel; only ``--valkey sentinel`` needs it)."""
    path = shutil.which("valkey-sentinel")
    if not path:
        raise BinaryNotFound(f"valkey-sentinel not found (needed by --valkey sentinel): {SENTINEL_HINT}")
    return Binary("valkey-sentinel", path, _server_version(path))
