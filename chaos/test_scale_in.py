"""Mid-exam scale-in, web 3 -> 1 under a steady chaos workload (chaos/scenarios/scale.py).

Graceful (drain, in-flight requests finish, SIGTERM): 0 failed requests, counted from the
history, and no request invoked after the scale reached a removed node. Negative control:
the same two nodes killed while in rotation fail requests (counted), and idempotent
retries still lose no acknowledged answer.
"""

import json

import pytest

from chaos.scenarios.scale import REMOVED_NODES

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def _history(run) -> list[dict]:
    return [json.loads(line) for line in (run.run_dir / "history.jsonl").read_text().splitlines() if line.strip()]


def _served_after(ops: list[dict], start_index: int) -> dict[str, int]:
    """{node: completions} of client ops invoked after history index ``start_index``."""
    invoked_at: dict[object, int] = {}
    served: dict[str, int] = {}
    for op in ops:
        if op["process"] in ("nemesis", "monitor"):
            continue
        if op["type"] == "invoke":
            invoked_at[op["process"]] = op["index"]
        elif op.get("node") and invoked_at.get(op["process"], -1) > start_index:
            served[op["node"]] = served.get(op["node"], 0) + 1
    return served


def _failed_requests(run) -> int:
    counts = run.checker("stats")["counts"]
    return counts["fail"] + counts["info"]


def test_graceful_scale_in_fails_no_request(run_chaos):
    run = run_chaos("scale_in")
    ops = _history(run)
    [start] = [op for op in ops if op["f"] == "fault-start" and op["value"]["kind"] == "scale"]
    assert (start["value"]["from"], start["value"]["to"]) == (3, 1), start
    drains = start["value"]["drains"]
    assert [d["node"] for d in drains] == ["web_3", "web_2"] and all(d["idle"] for d in drains), drains
    served = _served_after(ops, start["index"])
    assert served.get("web_1", 0) > 0, f"no request after the scale: the window was not under load ({served})"
    assert not set(served) & set(REMOVED_NODES), f"a removed node served a request after its drain: {served}"
    assert _failed_requests(run) == 0, run.summary()
    assert run.checker("answers")["counts"]["lost"] == 0
    assert run.valid is True, run.summary()
    print(f"graceful scale-in: failed requests 0, drains {drains}")


@pytest.mark.negative_control
def test_abrupt_removal_fails_requests_yet_loses_no_acknowledged_answer(run_chaos):
    run = run_chaos("scale_in_abrupt")
    assert sorted(f["target"] for f in run.faults() if f["kind"] == "kill") == sorted(REMOVED_NODES)
    failed = _failed_requests(run)
    assert failed > 0, f"the abrupt removal failed no request: the control proves nothing\n{run.summary()}"
    answers = run.checker("answers")["counts"]
    assert answers["acknowledged"] > 0 and answers["lost"] == 0 and answers["duplicated"] == 0, answers
    assert run.checker("stats")["counts"]["retries"] > 0
    assert run.valid is True, run.summary()
    print(f"abrupt scale-in: failed requests {failed}, acknowledged answers lost 0 of {answers['acknowledged']}")
