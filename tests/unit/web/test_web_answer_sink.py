"""The answer sink is chosen once per node (app.py); the handler only ever talks to it."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from web_support import RecordingDispatcher, TestClient, answer, count_rows, start, token_for

from stack.config import Settings
from stack.ledger.revisions import AnswerRejected, RevisionReceipt
from stack.ledger.schema import answers
from stack.web.answer_sink import DurableAnswers
from stack.web.app import create_app
from stack.web.write_behind import WriteBehind


class RecordingSink:
    """Stands in for whichever sink the node chose: receipts from here, nothing in the ledger."""

    def __init__(self) -> None:
        self.accepted: list[tuple[str, str, int, str, str]] = []
        self.closed = False

    def accept(self, attempt_id: str, question: str, revision: int, content: str, key: str) -> RevisionReceipt:
        self.accepted.append((attempt_id, question, revision, content, key))
        return RevisionReceipt(f"recorded-{len(self.accepted)}", attempt_id, question, revision, revision,
                               replayed=False)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(("write_behind", "sink_type"), [(0.0, DurableAnswers), (0.5, WriteBehind)],
                         ids=["durable", "write-behind"])
def test_the_node_chooses_its_sink_from_the_settings_and_closes_it(
    settings: Settings, ledger: Engine, dispatcher: RecordingDispatcher, write_behind: float, sink_type: type
) -> None:
    app = create_app(settings.with_overrides(answer_write_behind=write_behind), dispatcher=dispatcher)
    with TestClient(app):
        sink = app.state.proctor.answers
        assert type(sink) is sink_type
    if isinstance(sink, WriteBehind):
        assert not sink._thread.is_alive()  # the lifespan closed the writer


def test_the_handler_hands_every_answer_to_the_sink(settings: Settings, ledger: Engine,
                                                    dispatcher: RecordingDispatcher) -> None:
    """No branch in the handler: a replaced sink gets the answer, and the ledger does not."""
    app = create_app(settings, dispatcher=dispatcher)
    recording = RecordingSink()
    with TestClient(app) as client:
        app.state.proctor.answers.close()
        app.state.proctor.answers = recording
        token = token_for(client)
        attempt = start(client, token)
        reply = answer(client, token, attempt, "q2", "C", key="k-7")
    assert reply.status_code == 201 and reply.json()["receipt_id"] == "recorded-1"
    assert recording.accepted == [(attempt, "q2", 1, "C", "k-7")] and recording.closed
    assert count_rows(ledger, answers) == 0


def test_the_durable_sink_has_committed_before_it_returns(settings: Settings, ledger: Engine,
                                                          dispatcher: RecordingDispatcher) -> None:
    with TestClient(create_app(settings, dispatcher=dispatcher)) as client:
        attempt = start(client, token_for(client))
    sink = DurableAnswers(ledger, "web_test")
    receipt = sink.accept(attempt, "q1", 1, "A", "k-1")
    assert count_rows(ledger, answers) == 1 and receipt.replayed is False
    assert sink.accept(attempt, "q1", 1, "A", "k-1") == RevisionReceipt(receipt.receipt_id, attempt, "q1", 1, 1,
                                                                        replayed=True)
    with pytest.raises(AnswerRejected) as rejected:
        sink.accept("no-such-attempt", "q1", 1, "A", "k-2")
    assert rejected.value.reason == AnswerRejected.UNKNOWN_ATTEMPT
