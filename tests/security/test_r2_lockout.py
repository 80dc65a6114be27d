"""Round two, finding 6: the lockout was a denial of service.

Ten wrong codes for a victim locked the victim out for 60 s even with the right code, so ten
guesses a minute kept any student out of the exam. Now failures count per (account, source)
and per source: the guesser is slowed, the student is not. Figures are printed, not asserted.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from r2_node import running_node
from web_support import TestClient

from stack.web import ratelimit

ATTACKER = ("198.51.100.66", 40000)
VICTIM_HOME = ("203.0.113.7", 40001)


@pytest.fixture(autouse=True)
def frozen_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-memory limiter's clock held still (see test_request_limits.frozen_window)."""
    now = time.time()
    monkeypatch.setattr("limits.storage.memory.time", SimpleNamespace(time=lambda: now))


def test_an_attacker_cannot_lock_the_victim_out(tmp_path: Path) -> None:
    with running_node(tmp_path, client_address=ATTACKER) as node:
        guesses = [node.login("r2-01", f"guess-{i}").status_code for i in range(60)]
        print(f"\nattacker: 60 guesses for the victim, {guesses.count(401)} x 401, {guesses.count(429)} x 429")
        with TestClient(node.client.app, client=VICTIM_HOME) as victim:
            assert node.login("r2-01", client=victim).status_code == 201  # the student is not locked out
        free = ratelimit.LOGIN_FAILURE_TIERS[0].amount
        assert guesses[:free] == [401] * free and set(guesses[free:]) == {429}  # the guesser is slowed
        # The right code from the guessing source waits too: a 201 there would end the guessing.
        assert node.login("r2-01").status_code == 429


def test_one_source_spraying_accounts_meets_its_cap_and_no_one_else_does(tmp_path: Path) -> None:
    cap = getattr(ratelimit, "LOGIN_SOURCE_FAILURES", ratelimit.parse("300/minute")).amount  # parse: the parent has no cap
    with running_node(tmp_path, client_address=ATTACKER) as node:
        # One guess per account name: no account's own tier is reached, only the source's cap.
        sprayed = [node.login(f"sprayed-{i}", "guess").status_code for i in range(cap + 3)]
        print(f"\nattacker: {len(sprayed)} guesses over as many accounts, {sprayed.count(429)} x 429 "
              f"(cap {cap} a minute)")
        assert sprayed == [401] * cap + [429] * 3
        with TestClient(node.client.app, client=VICTIM_HOME) as student:
            assert node.login("r2-02", client=student).status_code == 201
