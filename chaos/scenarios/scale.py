"""Mid-exam scale-in (issue #12): the graceful path and its abrupt negative control.

The seed lowered a pool minimum during an exam and about 360 requests failed in two
minutes. ``scale_in`` removes two of three web nodes under a steady chaos workload
through the deployment's graceful scale (drain -> in-flight requests finish -> SIGTERM):
no request may fail. ``scale_in_abrupt`` removes the same two nodes the seed's way, a
kill while HAProxy still routes to them (frozen first, so requests are in flight): the
failed requests are counted, and the idempotent retries must still lose no
acknowledged answer. ``chaos/test_scale_in.py`` asserts both; the stats checker's
``fail``/``info`` counts in each report are the two figures.
"""

from __future__ import annotations

from chaos.nemesis import FaultSpec
from chaos.runner import Scenario
from chaos.load.exam import WorkloadSpec

__all__ = ["SCALE_SCENARIOS", "REMOVED_NODES"]

REMOVED_NODES = ("web_2", "web_3")
_WORKLOAD = WorkloadSpec(arrival_rate=4.0, duration=8.0, questions=5)
_OPTIONS = {"expect_ops": ["session", "start", "answer", "finish"]}


def _graceful(seed: int, scenario: Scenario) -> list[FaultSpec]:
    # restore=False: the stack stays at one node, so no request after the scale can reach a
    # removed node's name again (the test's causal check); 6 s keeps the window under load.
    return [FaultSpec(at=2.0, kind="scale", target="web", duration=6.0, params={"count": 1, "restore": False})]


def _abrupt(seed: int, scenario: Scenario) -> list[FaultSpec]:
    # The pool minimum lowered the seed's way: the nodes die while still in rotation, and
    # nothing restarts them until the fault ends (after the load).
    return [FaultSpec(at=2.0, kind="kill", target=name, duration=8.0, params={"freeze_first": 1.0})
            for name in REMOVED_NODES]


SCALE_SCENARIOS = (
    Scenario(
        name="scale_in",
        description="scale web 3 -> 1 mid-exam through the graceful drain (HAProxy drain, in-flight requests "
                    "finish, SIGTERM): no request fails",
        workload=_WORKLOAD,
        web=3,
        faults=_graceful,
        options=_OPTIONS,
    ),
    Scenario(
        name="scale_in_abrupt",
        description="negative control: web 3 -> 1 by killing two nodes still in rotation (frozen first): "
                    "requests fail, yet idempotent retries lose no acknowledged answer",
        workload=_WORKLOAD,
        web=3,
        faults=_abrupt,
        options=_OPTIONS,
    ),
)
