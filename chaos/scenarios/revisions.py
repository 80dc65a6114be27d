"""The answer-revision scenarios (#14): autosaved revisions, duplicates and reordering on
latency/jitter toxics, and the two negative controls the revision checkers must catch.

- ``answer_revisions``: must be valid; revisions arrive out of order and the highest
  acknowledged one is what each frozen answer holds;
- ``answer_revisions_last_arrival``: the ledger takes whatever arrives last
  (``PROCTOR_ANSWER_REVISIONS=last-arrival``); ``final_answers`` must name a lost update;
- ``answer_revisions_compacting``: the ledger keeps only the current revision in its log
  (``compacting``); ``revisions`` must report acknowledged revisions lost from the log.
"""

from __future__ import annotations

from dataclasses import replace

from chaos.nemesis import FaultSpec
from chaos.load.revisions import RevisionSpec
from chaos.runner import Scenario
from chaos.load.exam import WorkloadSpec

__all__ = ["REVISION_SCENARIOS", "WEB_LINKS", "reordering_toxics"]

WEB_LINKS = ("web_1", "web_2")

REORDER_TOXIC = {"type": "latency", "stream": "upstream", "attributes": {"latency": 60, "jitter": 60},
                 "name": "reorder"}
"""Each request chunk HAProxy forwards is held 0-120 ms: of two revisions sent at once on
separate connections, the later one overtakes the earlier about half of the time."""


CUT_REPLIES = {"type": "timeout", "stream": "downstream", "attributes": {"timeout": 300}, "name": "cut_replies"}
"""web_2's replies vanish for a moment: the revision is committed, the client gets a 502 (an
unknown outcome) and retries under the same key, which the stack must treat as a replay."""

TOXIC_AFTER_ARRIVALS = 4.0
"""Seconds the jitter stays on after the last student arrived: their revisions are still going out."""

CUT_AT, CUT_FOR = 2.0, 0.5


def reordering_toxics(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """Jitter on both web links for the whole load; on web_2 it pauses for CUT_FOR seconds
    while the replies are cut (faults on one link never overlap)."""
    end = scenario.workload.duration + TOXIC_AFTER_ARRIVALS
    resume = CUT_AT + CUT_FOR
    return [
        FaultSpec(at=0.0, kind="toxic", target="web_1", duration=end, params=dict(REORDER_TOXIC)),
        FaultSpec(at=0.0, kind="toxic", target="web_2", duration=CUT_AT, params=dict(REORDER_TOXIC)),
        FaultSpec(at=CUT_AT, kind="toxic", target="web_2", duration=CUT_FOR, params=dict(CUT_REPLIES)),
        FaultSpec(at=resume, kind="toxic", target="web_2", duration=end - resume, params=dict(REORDER_TOXIC)),
    ]


_OPTIONS = {"expect_ops": ["session", "start", "revise", "read_answers", "finish"]}

_BASE = Scenario(
    name="answer_revisions",
    description="students revise answers several times; revisions sent twice, concurrently over jittered web "
                "links, held back until a newer one was acknowledged, and retried after web_2's replies were cut: "
                "the highest acknowledged revision is frozen",
    workload=WorkloadSpec(arrival_rate=2.0, duration=3.0, questions=4, poll_deadline=10.0,
                          revisions=RevisionSpec()),
    links=WEB_LINKS,
    faults=reordering_toxics,
    options=_OPTIONS,
)

REVISION_SCENARIOS: tuple[Scenario, ...] = (
    _BASE,
    replace(_BASE, name="answer_revisions_last_arrival", expect_valid=False,
            description="negative control: the ledger takes whatever revision arrives last; "
                        "final_answers must name the lost update",
            settings={"answer_revisions": "last-arrival"}),
    replace(_BASE, name="answer_revisions_compacting", expect_valid=False,
            description="negative control: the ledger keeps only the current revision in its log; "
                        "revisions must report acknowledged revisions lost",
            settings={"answer_revisions": "compacting"}),
)
