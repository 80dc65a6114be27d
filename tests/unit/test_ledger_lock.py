"""The ledger_lock nemesis really holds the ledger's write lock, and only for the fault."""

import sqlite3
from contextlib import closing
import threading
import time
from types import SimpleNamespace

import pytest

from chaos.nemesis import FaultSpec, NemesisError
from chaos.nemesis.ledger import LedgerNemesis


def _ledger(tmp_path):
    path = tmp_path / "ledger.db"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x INTEGER)")
    return path, SimpleNamespace(settings=SimpleNamespace(ledger_url=f"sqlite:///{path}"))


def _hold(duration: float = 1.0) -> FaultSpec:
    return FaultSpec(at=0.0, kind="ledger_lock", target="ledger", duration=duration)


def _write(path, timeout: float) -> float:
    """Seconds one insert waited for the write lock (sqlite3's own busy wait, like the nodes')."""
    began = time.monotonic()
    with closing(sqlite3.connect(path, timeout=timeout)) as conn, conn:  # closed, not only committed
        conn.execute("INSERT INTO t VALUES (1)")
    return time.monotonic() - began


def test_a_writer_waits_while_the_lock_is_held_and_goes_on_at_the_end(tmp_path):
    path, stack = _ledger(tmp_path)
    nemesis = LedgerNemesis(stack)
    detail = nemesis.start(_hold())
    assert detail["dialect"] == "sqlite"
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _write(path, timeout=0.2)  # refused while held: the lock is real
    released = threading.Timer(0.3, nemesis.end, args=(_hold(),))
    released.start()
    assert _write(path, timeout=5.0) >= 0.25  # waited for the end, then wrote
    released.join()
    assert _write(path, timeout=0.2) < 0.2
    nemesis.heal()


def test_readers_go_on_while_the_lock_is_held(tmp_path):
    path, stack = _ledger(tmp_path)
    nemesis = LedgerNemesis(stack)
    nemesis.start(_hold())
    with closing(sqlite3.connect(path, timeout=0.2)) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
    assert "held_seconds" in nemesis.end(_hold())


def test_heal_releases_a_lock_whose_end_never_ran(tmp_path):
    path, stack = _ledger(tmp_path)
    nemesis = LedgerNemesis(stack)
    nemesis.start(_hold())
    nemesis.heal()
    assert _write(path, timeout=0.2) < 0.2
    nemesis.heal()  # idempotent


def test_a_hold_longer_than_the_writers_busy_timeout_is_refused(tmp_path):
    _, stack = _ledger(tmp_path)
    with pytest.raises(NemesisError, match="busy timeout"):
        LedgerNemesis(stack).start(_hold(duration=60.0))


def test_the_target_is_named_and_a_second_hold_refused(tmp_path):
    _, stack = _ledger(tmp_path)
    nemesis = LedgerNemesis(stack)
    with pytest.raises(NemesisError, match="'ledger'"):
        nemesis.start(FaultSpec(at=0.0, kind="ledger_lock", target="web_1", duration=1.0))
    nemesis.start(_hold())
    with pytest.raises(NemesisError, match="already held"):
        nemesis.start(_hold())
    nemesis.heal()
