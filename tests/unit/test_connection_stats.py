"""Connection counters: one file per process (forked horses append to it), installed by
the entry point, nothing written or registered at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import stack.connection_stats as connection_stats
import chaos.observe.processes as processes
from chaos.observe.processes import process_lifetimes
from chaos.observe.valkey_stats import read_process_counters
from stack.config import Settings
from stack.connection_stats import STATS_DIR, ConnectionStats, process_stats, record_process_connections

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_process_stats() -> Iterator[None]:
    before = process_stats()
    yield
    connection_stats.install_process_stats(before)


def _in_forked_child(stats: ConnectionStats, connects: int) -> None:
    """A child like an RQ horse: counts its own connects, flushes, leaves with os._exit."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for _ in range(connects):
                stats.record_connect()
        except BaseException:  # noqa: BLE001 - the parent sees a non-zero status instead
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_forked_children_append_to_their_parents_one_file(tmp_path: Path) -> None:
    path = tmp_path / STATS_DIR / "worker_ai_1.4242.jsonl"
    stats = ConnectionStats("worker_ai_1", path, min_interval=0.0)
    stats.record_connect()
    for _ in range(3):  # three jobs, three horses
        _in_forked_child(stats, connects=2)
    stats.record_error("reset", connecting=False)
    assert [p.name for p in (tmp_path / STATS_DIR).iterdir()] == ["worker_ai_1.4242.jsonl"]
    pids = {json.loads(line)["pid"] for line in path.read_text().splitlines()}
    assert len(pids) == 4 and os.getpid() in pids
    summed = read_process_counters(tmp_path)["worker_ai_1"]
    assert (summed["connects"], summed["pids"], summed["max_process_connects"]) == (1 + 3 * 2, 4, 2)
    assert (summed["errors"], summed["error_total"]) == ({"reset": 1}, 1)


def test_each_pid_counts_once_its_latest_line(tmp_path: Path) -> None:
    path = tmp_path / STATS_DIR / "web_1.77.jsonl"
    stats = ConnectionStats("web_1", path, min_interval=0.0)
    for _ in range(3):
        stats.record_connect()
    assert len(path.read_text().splitlines()) == 3  # three snapshots: 1, 2, 3 connects
    summed = read_process_counters(tmp_path)["web_1"]
    assert (summed["connects"], summed["pids"]) == (3, 1)


def test_each_process_file_is_one_lifetime_in_start_order(tmp_path: Path) -> None:
    folder = tmp_path / STATS_DIR
    folder.mkdir()
    (folder / "worker_sms_1.1200.jsonl").write_text('{"pid": 1200, "updated_at": 20.0}\n{"pid": 1201, "updated_at": 25.0}\n')
    (folder / "worker_sms_1.50.jsonl").write_text('{"pid": 50, "updated_at": 10.0}\n{"pid": 50}\n{"pid": 50, "updated_at": 12.5}\n{"pid": 50')
    # the restarted process (pid 1200, its horse 1201) comes second although its name sorts first
    assert process_lifetimes(tmp_path) == {"worker_sms_1": [(10.0, 12.5), (20.0, 25.0)]}
    assert process_lifetimes(tmp_path / "nowhere") == {}


def test_a_restarted_process_with_the_same_pid_is_a_second_lifetime(tmp_path: Path) -> None:
    folder = tmp_path / STATS_DIR
    folder.mkdir()
    lines = [{"pid": 8, "started_at": 1.0, "updated_at": 1.0}, {"pid": 31, "started_at": 4.0, "updated_at": 4.5},
             {"pid": 8, "started_at": 1.0, "updated_at": 5.0},  # a container's worker and its horse
             {"pid": 8, "started_at": 9.0, "updated_at": 9.0}, {"pid": 8, "started_at": 9.0, "updated_at": 12.0}]
    (folder / "worker_ai_1.8.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    # the horse's own started_at (4.0) is no restart; the owner's second start (9.0) is
    assert process_lifetimes(tmp_path) == {"worker_ai_1": [(1.0, 5.0), (9.0, 12.0)]}


def test_a_restarted_process_with_the_same_pid_keeps_its_predecessors_counts(tmp_path: Path) -> None:
    folder = tmp_path / STATS_DIR
    folder.mkdir()
    lines = [{"pid": 8, "started_at": 1.0, "connects": 3, "errors": {"reset": 2}},
             {"pid": 8, "started_at": 9.0, "connects": 1, "errors": {}},  # the container restarted: counts from 0
             {"pid": 8, "started_at": 9.0, "connects": 2, "errors": {"refused": 1}}]
    (folder / "relay.8.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    counters = read_process_counters(tmp_path)["relay"]
    assert (counters["pids"], counters["connects"], counters["max_process_connects"]) == (2, 3 + 2, 3)
    assert (counters["errors"], counters["error_total"]) == ({"reset": 2, "refused": 1}, 3)


def test_every_line_says_when_its_process_started(tmp_path: Path) -> None:
    path = tmp_path / STATS_DIR / "relay.5.jsonl"
    stats = ConnectionStats("relay", path, min_interval=0.0)
    stats.record_connect()
    stats.record_connect()
    first, second = (json.loads(line) for line in path.read_text().splitlines()[-2:])
    assert first["started_at"] == second["started_at"] <= first["updated_at"] <= second["updated_at"]


def test_the_offline_reader_names_the_folder_as_the_stack_writes_it() -> None:
    assert (processes.STATS_DIR, processes.STATS_SUFFIX) == (STATS_DIR, connection_stats.STATS_SUFFIX)


def test_the_entry_point_installs_a_file_only_under_the_runner(tmp_path: Path, restore_process_stats: None) -> None:
    outside = record_process_connections(Settings(run_dir=tmp_path, node_name="web_2"))
    assert process_stats() is outside and outside.path is None and outside.component == "web_2"
    inside = record_process_connections(Settings(run_dir=tmp_path, component="relay"))
    assert process_stats() is inside
    assert inside.path == tmp_path / STATS_DIR / f"relay.{os.getpid()}.jsonl"
    inside.record_connect()
    inside.dump()
    assert json.loads(inside.path.read_text().splitlines()[-1])["connects"] == 1


def test_importing_the_client_writes_nothing_and_registers_no_exit_hook(tmp_path: Path) -> None:
    """The runner's environment alone does not make a process write counters: its entry point does."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROCTOR_COMPONENT": "web_1", "PROCTOR_RUN_DIR": str(tmp_path)}
    probe = ("import atexit, redis.connection, redis.retry, stack.config; hooks = atexit._ncallbacks(); "
             "import stack.valkey_client, stack.connection_stats as c; "
             "c.process_stats().record_connect(); print(c.process_stats().path, atexit._ncallbacks() - hooks)")
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["None", "0"]  # hooks registered by our modules, beyond their dependencies'.
    assert not (tmp_path / STATS_DIR).exists()


def test_events_are_counted_per_process_and_summed_per_component(tmp_path: Path) -> None:
    stats = ConnectionStats("web_1", tmp_path / STATS_DIR / "web_1.77.jsonl", min_interval=0.0)
    for kind in ("oom_refusals", "oom_refusals", "limiter_fallbacks"):
        stats.record_event(kind)
    assert stats.snapshot()["events"] == {"oom_refusals": 2, "limiter_fallbacks": 1}
    horse = {"component": "web_1", "pid": 78, "connects": 1, "errors": {}, "events": {"oom_refusals": 1}}
    with (tmp_path / STATS_DIR / "web_1.77.jsonl").open("a") as lines:
        lines.write(json.dumps(horse) + "\n")  # another process of the component, in the same file
    counters = read_process_counters(tmp_path)["web_1"]
    assert counters["pids"] == 2
    assert counters["events"] == {"oom_refusals": 3, "limiter_fallbacks": 1}


def test_the_checker_knows_every_event_kind_the_stack_counts() -> None:
    from chaos.checkers.connections import EVENT_KINDS as CHECKED

    assert CHECKED == connection_stats.EVENT_KINDS


def test_timeouts_are_counted_by_phase_and_summed_per_component(tmp_path: Path) -> None:
    stats = ConnectionStats("web_1", tmp_path / STATS_DIR / "web_1.77.jsonl", min_interval=0.0)
    for phase in ("handshake", "handshake", "connect"):
        stats.record_timeout(phase)
    snap = stats.snapshot()
    assert (snap["timeouts"], snap["timeout_total"]) == ({"handshake": 2, "connect": 1}, 3)
    other = {"component": "web_1", "pid": 78, "connects": 2, "timeouts": {"handshake": 4}, "timeout_total": 4}
    with (tmp_path / STATS_DIR / "web_1.77.jsonl").open("a") as lines:
        lines.write(json.dumps(other) + "\n")
    counters = read_process_counters(tmp_path)["web_1"]
    assert (counters["timeouts"], counters["timeout_total"]) == ({"handshake": 6, "connect": 1}, 7)
