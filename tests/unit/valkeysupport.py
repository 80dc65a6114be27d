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
