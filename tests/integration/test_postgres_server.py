"""The private PostgreSQL server of the embedded stack (stack/embedded/postgres.py) takes
callers with its password only, loopback included."""

from __future__ import annotations

import psycopg
import pytest

from stack.embedded.postgres import PostgresServer

pytestmark = pytest.mark.integration


def test_only_a_caller_with_the_password_gets_in() -> None:
    with PostgresServer() as server:
        dsn = f"host=127.0.0.1 port={server.port} user=postgres dbname={server.database}"
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(dsn, password="not-the-password").close()
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(dsn).close()
        with psycopg.connect(dsn, password=server.password) as conn:
            assert conn.execute("select current_user").fetchone() == ("postgres",)
