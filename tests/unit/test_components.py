"""The component model (stack/components.py): lookups by role, lane and index, pools, stop stages."""

from __future__ import annotations

import pytest

from stack.components import STOP_STAGES, Component, ComponentTable, HealthProbe, worker_from_name


def _table() -> ComponentTable:
    return ComponentTable([
        Component("valkey", "valkey", port=7000, health=HealthProbe("valkey", "rediss://127.0.0.1:7000/0", ca="/ca")),
        Component("web_2", "web", index=2, port=7002),
        Component("web_10", "web", index=10, port=7010),
        Component("web_1", "web", index=1, port=7001, admin_port=7101),
        Component("relay", "relay"),
        Component("worker_merit_2", "worker", lane="merit", index=2),
        Component("worker_merit_1", "worker", lane="merit", index=1),
        Component("worker_ai_1", "worker", lane="ai", index=1),
    ])


def test_pools_are_ordered_by_index_not_by_name() -> None:
    table = _table()
    assert [c.name for c in table.pool("web")] == ["web_1", "web_2", "web_10"]
    assert [c.name for c in table.pool("merit")] == ["worker_merit_1", "worker_merit_2"]
    assert [c.name for c in table.pool("ai")] == ["worker_ai_1"]
    assert table.pool("sms") == []
    assert [c.name for c in table.by_role("worker")] == ["worker_merit_1", "worker_ai_1", "worker_merit_2"]


def test_lookup_by_role_lane_and_index() -> None:
    table = _table()
    assert table.find("worker", "merit", 2) == table.get("worker_merit_2")
    assert table.find("web", index=10) is table.get("web_10")
    assert table.find("worker", "sms", 1) is None
    assert table.find("relay") is table.get("relay")
    assert table.get("worker_ai_1").pool == "ai" and table.get("web_2").pool == "web"
    assert table.get("relay").pool is None and table.get("valkey").pool is None


def test_adding_and_removing_changes_the_pool() -> None:
    table = _table()
    table.add(Component("worker_merit_3", "worker", lane="merit", index=3))
    assert [c.index for c in table.pool("merit")] == [1, 2, 3]
    assert table.remove("worker_merit_1") is not None and table.remove("worker_merit_1") is None
    assert [c.index for c in table.pool("merit")] == [2, 3]
    assert "worker_merit_1" not in table and len(table) == 8
    with pytest.raises(ValueError, match="'web_1' already exists"):
        table.add(Component("web_1", "web", index=1))
    moved = table.put(Component("web_1", "web", index=1, port=9001))  # replaced in place
    assert table.names().index("web_1") == 3 and table.get("web_1").port == moved.port == 9001
    with pytest.raises(KeyError, match="no component named 'web_9'; known: valkey, web_2"):
        table.get("web_9")
    with pytest.raises(ValueError, match="pool must be one of"):
        table.pool("worker")


def test_pgids_are_filled_from_the_running_processes() -> None:
    filled = {c.name: c.pgid for c in _table().with_pgids({"web_1": 4242, "relay": None})}
    assert filled["web_1"] == 4242 and filled["relay"] is None and filled["worker_ai_1"] is None


def test_stop_stages_are_one_table() -> None:
    table = _table()
    stages = {c.name: c.stop_stage for c in table}
    assert stages["valkey"] == 2 and stages["relay"] == stages["web_1"] == stages["worker_ai_1"] == 0
    assert Component("sms_gateway", "sms_gateway").stop_stage == 1 == STOP_STAGES["faultproxy"]
    assert Component("faultproxy", "faultproxy", kind="toxiproxy-server").stop_stage == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "x", "role": "database"}, "role='database'"),
    ({"name": "worker_x_1", "role": "worker"}, "a worker needs a lane"),
    ({"name": "web_1", "role": "web", "lane": "merit"}, "a worker needs a lane, no other role has one"),
    ({"name": "worker_fast_1", "role": "worker", "lane": "fast"}, "lane='fast'"),
])
def test_bad_components_are_refused_with_the_field(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Component(**kwargs)  # type: ignore[arg-type]


def test_health_probes_keep_the_manifest_format() -> None:
    probes = [HealthProbe("http", "http://127.0.0.1:1/readyz", accept="any"),
              HealthProbe("valkey", "rediss://127.0.0.1:2/0", ca="/tls/ca.pem"),
              HealthProbe("ready_file", "/run/ready/worker_ai_1"), HealthProbe("alive")]
    assert [p.as_dict() for p in probes] == [
        {"http": "http://127.0.0.1:1/readyz", "accept": "any"}, {"valkey": "rediss://127.0.0.1:2/0", "ca": "/tls/ca.pem"},
        {"ready_file": "/run/ready/worker_ai_1"}, {"alive": "process"}]
    assert [HealthProbe.from_dict(p.as_dict()) for p in probes] == probes
    assert HealthProbe.from_dict(None) == HealthProbe("alive")
    with pytest.raises(ValueError, match="HealthProbe.kind='tcp'"):
        HealthProbe("tcp")
    with pytest.raises(ValueError, match="HealthProbe.accept='2xx'"):
        HealthProbe("http", "http://x", accept="2xx")


def test_manifest_entry_names_role_lane_index_and_stage() -> None:
    entry = Component("worker_sms_1", "worker", lane="sms", index=1, health=HealthProbe("ready_file", "/r")).manifest_entry()
    assert entry == {"kind": "worker", "role": "worker", "lane": "sms", "index": 1, "port": None,
                     "health": {"ready_file": "/r"}, "stop_stage": 0}
    assert Component("faultproxy", "faultproxy", kind="toxiproxy-server").manifest_entry()["kind"] == "toxiproxy-server"


def test_a_worker_name_gives_its_lane_and_index() -> None:
    assert worker_from_name("worker_merit_2") == Component("worker_merit_2", "worker", lane="merit", index=2)
    assert (worker_from_name("worker_sms_10").lane, worker_from_name("worker_sms_10").index) == ("sms", 10)
    assert worker_from_name("worker_merit_1") in list(_table())  # the very value the runner's table holds


@pytest.mark.parametrize("name", ["web_2", "valkey", "worker_merit", "worker_gpu_1", "worker_merit_x",
                                  "worker_merit_0", "worker__1", "relay_merit_1"])
def test_a_name_that_is_not_a_workers_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match=rf"component name '{name}' is not a worker's: expected worker_\{{lane\}}_\{{index\}}"):
        worker_from_name(name)
