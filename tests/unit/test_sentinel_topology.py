"""The Sentinel topology's pieces that start no process (issue #25): configs, ACL rules, the
spec's checks, the missing-binary message, the failover's bounds and its report timeline."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from chaos.bounds import derive_bounds, failover_windows, kill_windows
from chaos.history import Op
from chaos.ledgers import OutboxRow
from chaos.report import failover_markdown
from stack.embedded import StackError, binaries
from stack.embedded.certs import CertPaths
from stack.embedded.sentinel import MIN_REPLICAS_MAX_LAG, QUORUM, SERVICE, node_lines, write_sentinel_config
from stack.embedded.stack import StackSpec
from stack.embedded.valkey import write_valkey_config
from stack.valkey_acl import SENTINEL_USERS, USERS, draw_passwords
from stack.valkey_client import sentinel_addresses

CERTS = CertPaths(Path("/certs/ca.crt"), Path("/certs/server.crt"), Path("/certs/server.key"))
T0 = 1000.0


def _rule(users, name: str) -> str:
    return next(user for user in users if user.name == name).rule("pw")


def test_a_sentinel_is_tls_only_monitors_the_primary_with_quorum_two_and_keeps_its_secrets_private(tmp_path):
    passwords = draw_passwords()
    path = write_sentinel_config(tmp_path, "sentinel_1", 26001, CERTS, 6380, passwords)
    text = path.read_text()
    assert "port 0\n" in text and "tls-port 26001\n" in text and "tls-replication yes\n" in text
    assert f"sentinel monitor {SERVICE} 127.0.0.1 6380 {QUORUM}\n" in text and QUORUM == 2
    assert f"sentinel auth-user {SERVICE} sentinel\n" in text and passwords["sentinel"] in text
    assert "user default reset off" in text  # no password-less client may move the primary
    assert passwords["discovery"] not in text  # clients' password only as a digest
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_every_node_carries_the_replication_credential_and_only_the_replica_starts_as_one(tmp_path):
    passwords = draw_passwords()
    primary = node_lines(6380, passwords, replica_of=None)
    replica = node_lines(6381, passwords, replica_of=6380)
    for lines in (primary, replica):
        assert "masteruser replica" in lines and f'masterauth "{passwords["replica"]}"' in lines
        assert "tls-replication yes" in lines
    assert not any(line.startswith("replicaof") for line in primary)
    assert "replicaof 127.0.0.1 6380" in replica and "replica-announce-port 6381" in replica
    conf = write_valkey_config(tmp_path, 6381, CERTS, passwords=passwords, name="valkey_2", extra=replica)
    assert conf == (tmp_path / "valkey_2" / "valkey.conf").resolve() and "replicaof 127.0.0.1 6380" in conf.read_text()
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600


def test_the_replica_and_sentinel_users_hold_no_key_and_clients_cannot_steer_the_sentinels():
    replica = _rule(USERS, "replica")
    assert replica.endswith("-@all -@dangerous +psync +replconf +ping") and "~" not in replica
    assert "~" not in _rule(USERS, "sentinel")
    discovery = _rule(SENTINEL_USERS, "discovery")
    assert "+sentinel|get-master-addr-by-name" in discovery
    for steering in ("+sentinel|failover", "+sentinel|set", "+sentinel|monitor", "+sentinel|remove", "+@all"):
        assert steering not in discovery
    assert {u.name for u in (*USERS, *SENTINEL_USERS)} <= set(draw_passwords())


def test_the_spec_refuses_an_unknown_topology_and_valkey_links_with_sentinel():
    with pytest.raises(StackError, match="StackSpec.valkey='cluster': one of single, sentinel"):
        StackSpec(valkey="cluster").validate()
    with pytest.raises(StackError, match=r"\['valkey_web'\]: with StackSpec.valkey='sentinel' use the node links"):
        StackSpec(valkey="sentinel", links=("ai_provider", "valkey_web")).validate()
    with pytest.raises(StackError, match=r"\['valkey_node_2'\]: node links need StackSpec.valkey='sentinel'"):
        StackSpec(links=("valkey_node_2",)).validate()
    StackSpec(valkey="sentinel", links=("ai_provider", "valkey_node_1", "valkey_node_2")).validate()


def test_the_write_guard_is_on_every_node_with_the_sentinels_down_after_as_its_lag():
    passwords = draw_passwords()
    assert not any(line.startswith("min-replicas") for line in node_lines(6380, passwords, replica_of=None))
    for replica_of in (None, 6380):  # any node may be promoted
        lines = node_lines(6381, passwords, replica_of=replica_of, min_replicas=1)
        assert "min-replicas-to-write 1" in lines and f"min-replicas-max-lag {MIN_REPLICAS_MAX_LAG}" in lines
    assert MIN_REPLICAS_MAX_LAG == 2  # down-after 2000 ms, in the whole seconds Valkey takes
    with pytest.raises(StackError, match="valkey_min_replicas=1: 0, or 1 with valkey='sentinel'"):
        StackSpec(valkey_min_replicas=1).validate()
    with pytest.raises(StackError, match="valkey_min_replicas=2"):
        StackSpec(valkey="sentinel", valkey_min_replicas=2).validate()
    StackSpec(valkey="sentinel", valkey_min_replicas=1).validate()


def test_a_missing_sentinel_binary_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(binaries.BinaryNotFound,
                       match="valkey-sentinel not found .*apt-get install -t bookworm-backports valkey-sentinel"):
        binaries.find_sentinel()


def test_sentinel_addresses_parse_and_a_bad_entry_is_named():
    assert sentinel_addresses("127.0.0.1:1, 127.0.0.1:2,") == [("127.0.0.1", 1), ("127.0.0.1", 2)]
    with pytest.raises(ValueError, match="'127.0.0.1' is not host:port"):
        sentinel_addresses("127.0.0.1:1,127.0.0.1")


# ---------------------------------------------------------------- the failover's bounds

SCENARIO: dict[str, Any] = {
    "settings": {"liveness_ttl": 3.0, "relay_interval": 0.5},
    "stack": {"merit_workers": 2, "ai_workers": 1, "sms_workers": 1},
    "derive_bounds": ["outcome_deadline_seconds", "slo.merit.oldest_age"],
}


def _failover_end(never_back: list[str] = ()) -> dict[str, Any]:
    back = {"web_1": T0 + 3.3, "relay": T0 + 3.6, "worker_merit_1": T0 + 4.0, "worker_merit_2": T0 + 5.0,
            "worker_ai_1": T0 + 4.5, "worker_sms_1": T0 + 6.0}
    for name in never_back:
        back.pop(name)
    return {"fault_id": 0, "kind": "failover", "target": "primary", "node": "valkey", "killed_at": T0 + 1.0,
            "switch_at": T0 + 4.2, "switch_seconds": 3.2, "primary_after": "valkey_2", "first_success": back,
            "first_success_seconds": {k: round(v - T0 - 1.0, 3) for k, v in back.items()},
            "never_back": list(never_back), "ready": True, "ready_at": T0 + 9.0, "rejoined_as_replica": True,
            "errors_by_component": {"web_1": {"refused": 3}}}


def _history(end: dict[str, Any]) -> list[Op]:
    start = {k: end[k] for k in ("fault_id", "kind", "target", "node", "killed_at")}
    return [Op(index=0, time=1.0, process="nemesis", type="info", f="fault-start", value=start),
            Op(index=1, time=9.0, process="nemesis", type="info", f="fault-end", value=end)]


def _merit_rows() -> list[OutboxRow]:
    return [OutboxRow(operation_id=f"merit-a{i}", attempt_id=f"a{i}", kind="merit", status="done", attempts=1,
                      created_at=T0 + i * 0.5, enqueued_at=T0 + i * 0.5 + 0.05, done_at=T0 + i * 0.5 + 0.25)
            for i in range(20)]


def test_a_failover_is_a_window_per_worker_from_the_kill_to_its_first_connection_to_the_new_primary():
    windows = failover_windows(_failover_end())
    assert [(w.target, w.lane, w.start, w.end) for w in windows] == [
        ("worker_ai_1", "ai", T0 + 1.0, T0 + 4.5), ("worker_merit_1", "merit", T0 + 1.0, T0 + 4.0),
        ("worker_merit_2", "merit", T0 + 1.0, T0 + 5.0), ("worker_sms_1", "sms", T0 + 1.0, T0 + 6.0)]
    assert len(kill_windows(_history(_failover_end()))) == 4  # web nodes and the relay are not workers


def test_the_merit_bound_grows_with_the_measured_outage_of_both_merit_workers():
    merit = derive_bounds(SCENARIO, _history(_failover_end()), _merit_rows())["slo.merit.oldest_age"]
    assert merit["terms"]["all_down"] == pytest.approx(3.0)  # both down from the kill until worker_merit_1 was back
    assert merit["value"] is not None and merit["value"] > 3.0


def test_a_worker_that_never_reached_the_new_primary_leaves_the_bounds_underivable():
    derived = derive_bounds(SCENARIO, _history(_failover_end(never_back=["worker_merit_2"])), _merit_rows())
    assert derived["slo.merit.oldest_age"]["value"] is None
    assert "never came back" in derived["slo.merit.oldest_age"]["note"]


def _partition_end() -> dict[str, Any]:
    """As measured in a partition run (seed 20261006): every worker's stopping process reconnected
    to the new primary at the heal (8.1 s after the cut); they served again after their restart."""
    end = _failover_end()
    end["kind"] = "partition"
    end["first_success"] = {name: T0 + 9.1 for name in end["first_success"]}
    end["serving"] = {"worker_merit_1": T0 + 12.4, "worker_merit_2": T0 + 12.3, "worker_ai_1": T0 + 12.7,
                      "worker_sms_1": T0 + 12.5}
    end["serving_seconds"] = {k: round(v - T0 - 1.0, 3) for k, v in end["serving"].items()}
    end["never_serving"] = []
    return end


def test_a_failover_window_ends_when_the_worker_serves_again_not_at_its_first_connection():
    windows = {w.target: w.end for w in failover_windows(_partition_end())}
    assert windows == {"worker_ai_1": T0 + 12.7, "worker_merit_1": T0 + 12.4, "worker_merit_2": T0 + 12.3,
                       "worker_sms_1": T0 + 12.5}
    merit = derive_bounds(SCENARIO, _history(_partition_end()), _merit_rows())["slo.merit.oldest_age"]
    assert merit["terms"]["all_down"] == pytest.approx(11.3)  # the restarts count, not the 8.1 s reconnect


def test_a_worker_that_never_served_the_new_primary_leaves_the_bounds_underivable():
    end = _partition_end()
    end["serving"].pop("worker_ai_1")
    end["never_serving"] = ["worker_ai_1"]
    derived = derive_bounds(SCENARIO, _history(end), _merit_rows())
    assert derived["outcome_deadline_seconds"]["value"] is None
    assert "never came back" in derived["outcome_deadline_seconds"]["note"]


def test_the_report_shows_when_each_worker_served_again():
    end = _partition_end()
    end["serving"].pop("worker_sms_1")
    end["serving_seconds"].pop("worker_sms_1")
    end["never_serving"] = ["worker_sms_1"]
    text = "\n".join(failover_markdown([end]))
    assert "## Valkey failover: valkey cut off, valkey_2 promoted" in text
    assert "| worker_ai_1: serving again (queue connection + a liveness beat after the switch) | 11.700 |" in text
    assert "| worker_sms_1: never served the new primary | - |" in text


class _FakePrimary:
    """What _fresh_beats reads of the new primary: liveness keys and their PTTL (ms)."""

    def __init__(self, keys: dict[str, int]) -> None:
        self.keys = keys

    def scan_iter(self, match: str, count: int):
        prefix = match.rstrip("*")
        return iter([k.encode() for k in self.keys if k.startswith(prefix)])

    def pttl(self, key: bytes) -> int:
        return self.keys[key.decode()]


def test_only_a_liveness_key_written_after_the_switch_says_a_worker_beats_there(monkeypatch):
    """A key replicated from the old primary has less than ttl - (now - switch) left."""
    import time

    from chaos.nemesis.failover import FailoverNemesis, _Watch
    from stack.config import Settings

    nemesis = FailoverNemesis.__new__(FailoverNemesis)
    nemesis.stack = type("S", (), {"settings": Settings(liveness_ttl=3.0)})()
    monkeypatch.setattr(time, "time", lambda: T0 + 2.0)
    watch = _Watch("valkey", 1, T0 - 2.0, ("worker_ai_1", "worker_sms_1"), 0.0, switch_at=T0 + 1.0)
    primary = _FakePrimary({"proctor:alive:worker_ai_1.42.abc": 2500,  # written 0.5 s ago: after the switch
                            "proctor:alive:worker_sms_1.43.def": 1500})  # written 1.5 s ago: before it
    assert nemesis._fresh_beats(primary, watch, {"worker_ai_1", "worker_sms_1"}) == {"worker_ai_1"}


def test_the_report_shows_the_failover_timeline_in_order_and_the_errors_per_component():
    text = "\n".join(failover_markdown([_failover_end(never_back=["worker_sms_1"])]))
    assert "## Valkey failover: valkey killed, valkey_2 promoted" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "seconds" not in line]
    assert rows[0] == "| SIGKILL valkey | 0.000 |" and rows[1].endswith("| 3.200 |")
    assert rows[2] == "| web_1: first connection to the new primary | 2.300 |"
    assert "| worker_sms_1: never reached the new primary | - |" in text
    assert "back as a replica | 8.000 |" in text and "web_1 {'refused': 3}" in text


def test_a_sentinel_connection_asks_where_the_primary_is_each_time_it_reconnects(monkeypatch):
    """redis-py reconnects inside a command to the address it had; under a silent partition that
    is the old primary again and again (a SET took 66 s here). Ours asks the pool first."""
    from redis.sentinel import SentinelManagedSSLConnection

    from stack.valkey_client import CountingSentinelSSLConnection

    class Pool:
        is_master = True
        primary = ("127.0.0.1", 2002)

        def get_master_address(self):
            return self.primary

    dialed = []
    monkeypatch.setattr(SentinelManagedSSLConnection, "connect_check_health",
                        lambda self, *args, **kwargs: dialed.append((self.host, self.port)), raising=False)
    pool = Pool()
    connection = CountingSentinelSSLConnection(connection_pool=pool, host="127.0.0.1", port=2001)
    connection.connect_check_health(check_health=True)
    pool.primary = ("127.0.0.1", 2003)  # the Sentinels switched
    connection.connect_check_health(check_health=True)
    assert dialed == [("127.0.0.1", 2002), ("127.0.0.1", 2003)]


class _SlowKillStack:
    """A deployment whose kill returns late, as on a loaded machine; it records the order of calls."""

    def __init__(self, kill_takes: float) -> None:
        from stack.config import Settings

        self.settings = Settings(valkey_sentinels="127.0.0.1:1")
        self.run_dir = "."
        self.kill_takes = kill_takes
        self.calls: list[str] = []

    def valkey_nodes(self) -> dict[tuple[str, int], str]:
        return {("127.0.0.1", 7000): "valkey"}

    def components(self) -> list:
        return []

    def pids(self, name: str) -> list[int]:
        return [42]

    def set_autorestart(self, name: str, enabled: bool) -> None:
        self.calls.append(f"autorestart {enabled}")

    def kill(self, name: str) -> list[int]:
        self.calls.append("kill")
        import time
        time.sleep(self.kill_takes)
        self.landed = time.time()
        return [42]

    def kill_landed_at(self, name: str) -> float | None:
        return self.landed


def _recorded_hold(stack, effect_at: float):
    """``answer_held`` as the nemeses use it, recording when it holds and when it lets go."""
    from contextlib import contextmanager

    from chaos.nemesis.provider import HeldAnswer

    @contextmanager
    def held(_stack, params):
        stack.calls.append("effect")
        answer = HeldAnswer(effect={"id": 1, "created_at": effect_at})
        try:
            yield answer
        finally:
            import time

            stack.calls.append("release")
            answer.released_at = time.time()

    return held


def test_the_held_answer_goes_after_the_kill_landed_and_autorestart_is_off_before_the_effect(monkeypatch):
    """A kill that leaves late must still come before the provider's answer (the test's proof that a
    job was in flight), and its lateness must show in ``effect_age_at_kill``; stamped before the kill,
    a late one read as early."""
    import time

    from chaos.nemesis import failover
    from chaos.nemesis.base import FaultSpec

    stack = _SlowKillStack(kill_takes=0.3)
    effect_at = time.time()
    monkeypatch.setattr(failover, "primary_address", lambda settings: ("127.0.0.1", 7000))
    monkeypatch.setattr(failover, "answer_held", _recorded_hold(stack, effect_at))
    monkeypatch.setattr(failover, "read_process_counters", lambda run_dir: {})
    monkeypatch.setattr(failover.FailoverNemesis, "_watch", lambda self, watch: None)
    nemesis = failover.FailoverNemesis(stack)
    start = nemesis.start(FaultSpec(at=3.0, kind="failover", target="primary", duration=8.0,
                                    params={"after_effect_at": "ai_provider"}))
    assert stack.calls == ["autorestart False", "effect", "kill", "release"]
    assert start["mid_job"] is True and start["after_effect"] is True, start
    assert start["effect_age_at_kill"] >= 0.3, start
    assert start["answer_released_after_kill"] >= 0, start
    assert start["killed_at"] < effect_at + 0.3  # the timeline still counts from the signal's moment


def test_a_worker_kill_lets_the_held_answer_go_only_after_its_signal(monkeypatch):
    import time

    from chaos.nemesis import process
    from chaos.nemesis.base import FaultSpec

    stack = _SlowKillStack(kill_takes=0.3)
    stack.components = lambda: [type("C", (), {"name": "worker_ai_1"})()]
    stack.kill = lambda name, sig: stack.calls.append("kill")
    effect_at = time.time()
    monkeypatch.setattr(process, "answer_held", _recorded_hold(stack, effect_at))
    detail = process.ProcessNemesis(stack).start(FaultSpec(at=1.0, kind="kill", target="worker_ai_1", duration=5.0,
                                                           params={"after_effect_at": "ai_provider"}))
    assert stack.calls == ["effect", "autorestart False", "kill", "release"]
    assert detail["after_effect"] is True and detail["answer_released_after_kill"] >= 0, detail


class _EngineLikeStack(_SlowKillStack):
    """A kill whose call returns long after its process died, as a container engine's does."""

    def __init__(self, victim, bookkeeping: float) -> None:
        super().__init__(kill_takes=0.0)
        self.victim, self.bookkeeping = victim, bookkeeping

    def pids(self, name: str) -> list[int]:
        return [self.victim.pid]

    def kill(self, name: str) -> list[int]:
        import signal
        import time

        self.calls.append("kill")
        self.victim.send_signal(signal.SIGKILL)
        self.victim.wait()
        time.sleep(self.bookkeeping)
        self.returned_at = self.landed = time.time()  # the engine's record, stamped late
        return [self.victim.pid]


def test_the_held_answer_goes_when_the_victim_is_gone_not_when_the_engine_returns(monkeypatch):
    import subprocess
    import sys
    import time

    from chaos.nemesis import failover
    from chaos.nemesis.base import FaultSpec
    from chaos.nemesis.provider import HeldAnswer

    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stack = _EngineLikeStack(victim, bookkeeping=1.0)
    released: list[float] = []
    effect_at = time.time()

    def held(_stack, params):
        from contextlib import contextmanager

        @contextmanager
        def hold():
            answer = HeldAnswer(effect={"id": 1, "created_at": effect_at},
                                _let_go=lambda: released.append(time.time()) or {"released_at": released[-1]})
            try:
                yield answer
            finally:
                answer.release()
        return hold()

    monkeypatch.setattr(failover, "primary_address", lambda settings: ("127.0.0.1", 7000))
    monkeypatch.setattr(failover, "answer_held", held)
    monkeypatch.setattr(failover, "read_process_counters", lambda run_dir: {})
    monkeypatch.setattr(failover.FailoverNemesis, "_watch", lambda self, watch: None)
    start = failover.FailoverNemesis(stack).start(FaultSpec(at=3.0, kind="failover", target="primary", duration=8.0,
                                                            params={"after_effect_at": "ai_provider"}))
    assert len(released) == 1  # once, though the block's end asks again
    assert released[0] < stack.returned_at - 0.5, (released[0], stack.returned_at)  # before the engine's bookkeeping ended
    assert 0 <= start["answer_released_after_kill"] < 0.5, start  # counted from the death seen, not the late record
    assert start["effect_age_at_kill"] < 0.9, start
