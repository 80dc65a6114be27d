"""The runner's nemesis set plays every fault kind a scenario may schedule, ``provider`` included
(it used to be built only ad hoc in a scenario's prepare, so a scheduled provider fault raised
"no nemesis handles fault kind 'provider'")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from netsupport import ServedApp
from chaos.history import History, load_history
from chaos.nemesis import FaultSpec, run_schedule
from chaos.runner import Scenario, _nemesis_for
from stack.config import Settings
from stack.providers import ai

ADMIN_TOKEN = "proctor-admin"


class ProvidersOnly:
    """The part of a Deployment the nemeses read at construction: its URLs and settings."""

    def __init__(self, settings: Settings, urls: dict[str, str]) -> None:
        self.settings, self.urls = settings, urls

    def components(self) -> list[Any]:
        return []


@pytest.fixture
def ai_url(tmp_path: Path) -> Iterator[str]:
    with ServedApp(ai.create_app(Settings(run_dir=tmp_path, time_scale=0.001))) as served:
        yield served.url


def _knobs(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/admin/faults", headers={"X-Admin-Token": ADMIN_TOKEN}).json()  # type: ignore[no-any-return]


def test_a_scheduled_provider_fault_starts_and_heals_through_the_runners_nemesis(ai_url: str, tmp_path: Path) -> None:
    deployment = ProvidersOnly(Settings(run_dir=tmp_path, admin_token=ADMIN_TOKEN), {"ai_provider": ai_url})
    nemesis = _nemesis_for(deployment, Scenario(name="provider_fault", description="test"))  # type: ignore[arg-type]
    assert "provider" in nemesis.kinds
    assert _knobs(ai_url)["key_revoked"] is False
    fault = FaultSpec(at=0.0, kind="provider", target="ai_provider", duration=0.05, params={"key_revoked": True})
    with History(tmp_path / "history.jsonl") as history:
        asyncio.run(run_schedule(nemesis, [fault], history, time.monotonic()))
    start, end = [op for op in load_history(tmp_path / "history.jsonl") if op.f in ("fault-start", "fault-end")]
    assert start.f == "fault-start" and start.value["knobs"]["key_revoked"] is True  # the provider's own answer
    assert end.f == "fault-end" and end.value["knobs"]["key_revoked"] is False
    assert _knobs(ai_url)["key_revoked"] is False  # healed on schedule, not left for the run's final heal
    nemesis.heal()  # idempotent: nothing left to restore
