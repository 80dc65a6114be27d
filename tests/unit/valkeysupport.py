"""A throw-away plaintext valkey-server on a free loopback port, for tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

from redis import Redis

from netsupport import free_port

__all__ = ["running_valkey"]


@contextlib.contextmanager
def running_valkey(workdir: Path) -> Iterator[Redis]:
    port = free_port()
    server = subprocess.Popen(["valkey-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(workdir)], stdout=subprocess.DEVNULL)
    client = Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except Exception:  # noqa: BLE001 - not up yet: retry until the deadline
                assert time.monotonic() < deadline, "valkey-server did not start (package valkey-server)"
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=10)


@contextlib.contextmanager
def filled_past_maxmemory(valkey: Redis, prefix: str) -> Iterator[Redis]:
    """Valkey full under noeviction: 1 MiB of filler under ``prefix``, then maxmemory set below what it
    holds, so every write is refused however little a refused command's buffers free after it (filling
    only up to the limit left room for a small write now and then). Undone on the way out."""
    policy = valkey.config_get("maxmemory-policy")["maxmemory-policy"]
    keys = [f"{prefix}{n}" for n in range(16)]
    for key in keys:
        valkey.set(key, b"x" * 64 * 1024)
    valkey.config_set("maxmemory-policy", "noeviction")
    valkey.config_set("maxmemory", str(int(valkey.info("memory")["used_memory"]) - 512 * 1024))
    try:
        yield valkey
    finally:
        valkey.config_set("maxmemory", "0")
        valkey.config_set("maxmemory-policy", policy)
        valkey.delete(*keys)
