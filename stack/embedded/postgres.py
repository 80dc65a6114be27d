"""A private PostgreSQL server for the embedded stack's ledger (tests, ``bench_ramp.py --ledger
postgres``): its own data folder, port and socket folder, started and stopped by pid. Debian's
server binaries refuse to run as root, so as root the cluster runs as the ``postgres`` system
user that the package creates. Callers authenticate with SCRAM and a password made for this
cluster (no ``trust``, not even on 127.0.0.1: the reference stack takes no loopback address
as a credential)."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PostgresServer", "find_postgres_bin"]

INSTALL_HINT = "apt-get install postgresql (Debian 12: PostgreSQL 15)"


def find_postgres_bin() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    def __init__(self, database: str = "proctor") -> None:
        bindir = find_postgres_bin()
        if bindir is None:
            raise RuntimeError(f"PostgreSQL server binaries not found: {INSTALL_HINT}")
        self.bindir = bindir
        self.database = database
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="proctor-pg-"))
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.process: subprocess.Popen[bytes] | None = None
        self.password = secrets.token_urlsafe(24)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *argv: str) -> None:
        env = {**os.environ, "PGPASSWORD": self.password}
        subprocess.run([*self.as_user, *argv], check=True, capture_output=True, timeout=60, env=env)

    def __enter__(self) -> "PostgresServer":
        if self.as_user:
            shutil.chown(self.folder, "postgres")
        data = self.folder / "data"
        password_file = self.folder / "password"
        password_file.write_text(self.password + "\n")
        if self.as_user:
            shutil.chown(password_file, "postgres")
        self._run(str(self.bindir / "initdb"), "-D", str(data), "-A", "scram-sha-256", "-U", "postgres",
                  f"--pwfile={password_file}", "--no-sync")
        password_file.unlink()
        log = open(self.folder / "postgres.log", "wb")  # closed with the server
        self.process = subprocess.Popen(
            [*self.as_user, str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port),
             "-k", str(self.folder), "-c", "listen_addresses=127.0.0.1"],
            stdout=log, stderr=log, start_new_session=True,
        )
        log.close()
        self._wait_ready()
        self._run(str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", self.database)
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while subprocess.run([str(self.bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                             capture_output=True).returncode != 0:
            if time.monotonic() > deadline or (self.process and self.process.poll() is not None):
                raise RuntimeError("PostgreSQL did not start: " + (self.folder / "postgres.log").read_text()[-2000:])
            time.sleep(0.1)

    def __exit__(self, *_: object) -> None:
        if self.process is not None and self.process.poll() is None:
            # SIGINT = fast shutdown of the postmaster and its children; the group covers runuser too.
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
