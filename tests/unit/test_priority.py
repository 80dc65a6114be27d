"""Process priority per component (stack/priority.py) and where the embedded runner applies it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stack.embedded.spec import StackSpec, python_component
from stack.priority import IDLE, NICENESS, NICENESS_ENV, niceness, niceness_table


def test_merit_runs_ahead_of_ai_and_sms_and_at_the_web_nodes_level() -> None:
    assert NICENESS["merit"] == NICENESS["web"] == 0
    assert NICENESS["ai"] > NICENESS["provider"] > NICENESS["merit"]
    assert NICENESS["sms"] > NICENESS["merit"]


def test_overrides_replace_only_the_named_roles() -> None:
    table = niceness_table({NICENESS_ENV: "merit=5, ai=10"})
    assert table == {**NICENESS, "merit": 5, "ai": 10}
    assert niceness("provider", {NICENESS_ENV: ""}) == NICENESS["provider"]
    assert niceness("relay", {}) == 0
    assert niceness("haproxy", {}) == 0  # no entry: not niced


@pytest.mark.parametrize("raw, named", [("merit", "'merit'"), ("merti=3", "'merti=3'"),
                                        ("ai=x", "integer"), ("ai=IDLE", "integer"), ("sms=20", "0..19"), ("web=-1", "0..19")])
def test_a_bad_override_names_the_variable_and_the_entry(raw: str, named: str) -> None:
    with pytest.raises(ValueError, match=NICENESS_ENV) as caught:
        niceness_table({NICENESS_ENV: raw})
    assert named in str(caught.value)


def _child_niceness(role: str, env_value: str, start_at: int = 0) -> int:
    code = (f"import os; os.setpriority(os.PRIO_PROCESS, 0, {start_at}); "
            f"from stack.priority import apply_niceness; print(apply_niceness({role!r}), os.getpriority(os.PRIO_PROCESS, 0))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, NICENESS_ENV: env_value},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1]  # what it returns is what the kernel has
    return int(out[1])


def test_apply_sets_the_level_and_never_lowers_an_inherited_one() -> None:
    inherited = os.getpriority(os.PRIO_PROCESS, 0)
    assert _child_niceness("ai", "ai=12", start_at=inherited) == max(inherited, 12)
    assert _child_niceness("merit", "merit=0", start_at=max(inherited, 7)) == max(inherited, 7)  # not lowered


def _child_policy(role: str, env_value: str, start_idle: bool = False) -> tuple[str, bool, bool]:
    """(what apply_niceness returned, the process under SCHED_IDLE, a forked child under it)."""
    code = ("import os, sys; "
            + ("os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)); " if start_idle else "")
            + f"from stack.priority import apply_niceness; level = apply_niceness({role!r}); pid = os.fork()\n"
            "if pid == 0: os._exit(os.sched_getscheduler(0) == os.SCHED_IDLE)\n"
            "print(level, os.sched_getscheduler(0) == os.SCHED_IDLE, os.waitpid(pid, 0)[1] >> 8 == 1)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, NICENESS_ENV: env_value},
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0], out[1] == "True", out[2] == "True"


def test_idle_puts_the_process_and_its_horses_under_sched_idle() -> None:
    assert niceness_table({NICENESS_ENV: "ai=idle"})["ai"] == IDLE
    assert _child_policy("ai", "ai=idle") == ("idle", True, True)
    assert _child_policy("merit", "ai=idle")[1:] == (False, False)  # control: another role stays normal
    assert _child_policy("merit", "", start_idle=True) == ("idle", True, True)  # never raised back


def test_the_fake_providers_start_under_nice_and_the_relay_does_not(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NICENESS_ENV, "provider=11")
    ai = python_component(StackSpec(), tmp_path, "ai_provider", port=4100)
    assert ai.argv[:3] == ("nice", "-n", "11") and "stack.providers.ai:create_app" in ai.argv
    assert python_component(StackSpec(), tmp_path, "relay").argv[0] == sys.executable
    monkeypatch.setenv(NICENESS_ENV, "provider=idle")
    assert python_component(StackSpec(), tmp_path, "ai_provider", port=4100).argv[:3] == ("chrt", "--idle", "0")
    monkeypatch.setenv(NICENESS_ENV, "provider=0")  # control: level 0 leaves the argv as it was
    assert python_component(StackSpec(), tmp_path, "sms_gateway", port=4101).argv[0] == sys.executable


def test_a_callers_own_provider_command_runs_as_given(tmp_path: Path) -> None:
    spec = StackSpec(commands={"ai_provider": ("{python}", "-m", "http.server", "{port}")})
    assert python_component(spec, tmp_path, "ai_provider", port=4100).argv[0] == sys.executable
