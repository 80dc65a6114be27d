"""Smoke test of the real stack (web, providers, relay, RQ workers) under the embedded runner."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from stack.config import WORKER_MODEL_DEFAULTS
from stack.deploy.secrets import login_body
from stack.embedded.stack import EmbeddedStack, StackSpec
from stack.embedded.watchdog import _read_stat
from stack.lanes.worker import RELAY_LIVENESS, liveness_key

pytestmark = [
    pytest.mark.integration,
]

TIME_SCALE = 0.3  # a 10 s case AI call takes 3 s: long enough to catch the RQ horse mid-job


def _alive(pid: int) -> bool:
    info = _read_stat(pid)
    return info is not None and info.state != "Z"


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    while (left := {p for p in pids if _alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture(scope="module")
def real_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    spec = StackSpec(name="smoke", web=2, run_dir=tmp_path_factory.mktemp("real") / "run",
                     # The AI lane forks a horse per job here, as a user may choose
                     # (PROCTOR_WORKER_MODEL): the horse's kill below needs one.
                     settings_overrides={"time_scale": TIME_SCALE,
                                         "worker_models": {**WORKER_MODEL_DEFAULTS, "ai": "fork"}})
    seen: set[int] = set()
    with EmbeddedStack(spec) as stack:
        yield stack
        seen = {pid for name in stack.supervisor.names() for pid in stack.supervisor.pids(name)}
    assert _wait_gone(seen, 2) == set(), "processes left after the stack stopped"


def _finish_an_attempt(client: httpx.Client, run_dir: Path, student: int) -> None:
    token = client.post("/v1/sessions", json=login_body(run_dir, "NOVA-101", student)).json()["token"]
    auth = {"Authorization": f"Bearer {token}"}
    attempt = client.post("/v1/attempts", headers=auth).json()["attempt_id"]
    assert client.post(f"/v1/attempts/{attempt}/finish", headers=auth).status_code == 202


def test_real_stack_is_ready_fast_and_balanced(real_stack: EmbeddedStack) -> None:
    print(f"real stack ready in {real_stack.startup_seconds:.2f}s")
    assert real_stack.startup_seconds is not None and real_stack.startup_seconds > 0  # speed: bench, not test
    with httpx.Client(base_url=real_stack.urls["api"], trust_env=False, timeout=10) as client:
        assert {client.get("/readyz").headers.get("X-Proctor-Node") for _ in range(6)} == {"web_1", "web_2"}
        session = client.post("/v1/sessions", json=login_body(real_stack.run_dir, "NOVA-101", 1))
        assert session.status_code == 201, session.text
    assert real_stack.valkey().ping()


def _process_groups(pids: list[int]) -> set[int]:
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass  # the horse finished between listing and asking
    return groups


def test_kill_takes_the_rq_horse_with_the_worker(real_stack: EmbeddedStack) -> None:
    with httpx.Client(base_url=real_stack.urls["api"], trust_env=False, timeout=10) as client:
        _finish_an_attempt(client, real_stack.run_dir, 2)
    deadline = time.monotonic() + 10
    # The horse calls os.setpgrp() just after the fork: wait until it has left the worker's group.
    while len(_process_groups(tree := real_stack.supervisor.pids("worker_ai_1"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(tree) >= 2, f"no horse seen: {real_stack.supervisor.log_tail('worker_ai_1')}"
    assert len(_process_groups(tree)) >= 2  # the horse left the worker's group
    real_stack.supervisor.kill("worker_ai_1")
    assert _wait_gone(set(tree), 2) == set()
    real_stack.wait_healthy("worker_ai_1", 20)


def test_the_relay_keeps_a_liveness_key_that_outlives_it_by_one_ttl_only(real_stack: EmbeddedStack) -> None:
    """Through its own ACL user: the key the final read's queue evidence looks for (a pending row
    with no relay alive is stuck, stack/lanes/evidence.py). Killed, the relay's key expires."""
    valkey, key = real_stack.valkey(), liveness_key(RELAY_LIVENESS)
    ttl_ms = real_stack.settings.liveness_ttl * 1000
    assert 0 < valkey.pttl(key) <= ttl_ms, real_stack.supervisor.log_tail("relay")
    real_stack.supervisor.set_autorestart("relay", False)
    real_stack.supervisor.kill("relay")
    assert _key_becomes(valkey, key, present=False, within=2 * ttl_ms / 1000 + 5)  # its own TTL ends it
    real_stack.supervisor.set_autorestart("relay", True)
    real_stack.wait_healthy("relay", 20)
    assert _key_becomes(valkey, key, present=True, within=20), real_stack.supervisor.log_tail("relay")  # the restarted relay's


def _key_becomes(valkey, key: str, present: bool, within: float) -> bool:
    """Poll for the key's presence; ``within`` is a hang guard, not a verdict."""
    deadline = time.monotonic() + within
    while bool(valkey.exists(key)) != present and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(valkey.exists(key)) == present


def test_proctor_scale_and_lock_go_through_the_admin_api(real_stack: EmbeddedStack,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`proctor lock` stores a window; `proctor scale` is refused below it (exit 1, the exam and
    its window named), `--force` scales and leaves the audit record. Last in the module: it
    leaves the stack at web=2 with the window closed."""
    from stack.admin_cli import lock_main, scale_main

    run_dir = ["--run-dir", str(real_stack.run_dir)]
    assert lock_main(["NOVA-101", "--opens", "now", "--closes", "+1h", "--min-web", "2",
                      "--min-worker", "merit=2", *run_dir]) == 0
    assert scale_main(["web=3", *run_dir]) == 0  # up is never refused
    assert scale_main(["web=1", *run_dir]) == 1
    refusal = capsys.readouterr().err
    assert "refused (409)" in refusal and "exam NOVA-101 (window " in refusal and "web >= 2" in refusal, refusal
    assert len(real_stack.component_table().pool("web")) == 3
    assert scale_main(["web=2", "merit=1", "--force", "--reason", "drill", *run_dir]) == 0
    out = capsys.readouterr().out
    assert "web: 3 -> 2" in out and "web_3: drained" in out and "lock of NOVA-101 overridden" in out, out
    admin, headers = real_stack.urls["admin"], {"X-Admin-Token": real_stack.settings.admin_token}
    overrides = httpx.get(f"{admin}/admin/audit", params={"action": "scale.lock_override"}, headers=headers).json()
    assert [(r["detail"]["pool"], r["detail"]["to"], r["detail"]["reason"]) for r in overrides["records"]] == [
        ("merit", 1, "drill")]  # web=2 met the minimum; merit=1 did not
    assert scale_main(["merit=2", *run_dir]) == 0
    assert lock_main(["NOVA-101", "--opens", "1", "--closes", "2", *run_dir]) == 0  # closed again
