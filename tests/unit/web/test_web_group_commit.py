"""Group commit (stack/web/group_commit.py): answers arriving together share one transaction, and
each is acknowledged only after the commit that holds it; ack-at-enqueue is the control."""

from __future__ import annotations

import dataclasses
import fcntl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, select
from web_support import RecordingDispatcher, TestClient, answer, count_rows, start, token_for

from stack.config import Settings
from stack.ledger.engine import make_engine
from stack.ledger.revisions import AnswerRejected
from stack.ledger.schema import answers
from stack.ledger.write_queue import lock_path_of
from stack.web.app import create_app
from stack.web.group_commit import AckAtEnqueue, GroupCommitAnswers

ANSWERS = 5


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The ledger's writers queue (PROCTOR_LEDGER_WRITERS=queued), which the tests hold to keep commits waiting."""
    return dataclasses.replace(settings, ledger_writers="queued")


@contextmanager
def ledger_writes_held(settings: Settings) -> Iterator[None]:
    """Hold the ledger's writers queue, so every commit waits until the block ends."""
    lock_file = lock_path_of(str(settings.run_dir / "ledger.db"))
    assert lock_file is not None
    with open(lock_file, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _attempts(settings: Settings, dispatcher: RecordingDispatcher, count: int) -> list[str]:
    with TestClient(create_app(settings, dispatcher=dispatcher)) as client:
        return [start(client, token_for(client, student)) for student in (f"s-{n}" for n in range(1, count + 1))]


def _committed(reader: Engine, attempt: str) -> bool:
    with reader.connect() as conn:  # a WAL snapshot: a read on the write engine would queue for the lock
        return conn.execute(select(answers.c.attempt_id).where(answers.c.attempt_id == attempt)).first() is not None


def _answer_all_while_held(settings: Settings, ledger: Engine, sink: GroupCommitAnswers, attempts: list[str],
                           *, acknowledges_early: bool = False) -> tuple[int, list]:
    """Send one answer per attempt while the ledger's writes are held; returns how many replies
    came back while their answer was not in the ledger, and every outcome once the hold ends.
    The committer takes the answers queued when it woke and waits for the lock; the rest queue. A sink that
    ``acknowledges_early`` (the control) is given the time to answer every request meanwhile."""
    outcomes: list = []
    early: list[str] = []
    reader = make_engine(settings, read_only=True)

    def send(attempt: str) -> None:
        try:
            outcomes.append(sink.accept(attempt, "q1", 1, f"answer of {attempt}", f"k-{attempt}"))
        except AnswerRejected as refused:
            outcomes.append(refused)
            return
        if not _committed(reader, attempt):
            early.append(attempt)

    threads = [threading.Thread(target=send, args=(attempt,)) for attempt in attempts]
    with ledger_writes_held(settings):
        for thread in threads:
            thread.start()
        while len(sink._queue) + sink.committing < len(attempts):  # no clock: all queued or in the commit
            time.sleep(0.002)
        if acknowledges_early:
            for thread in threads:
                thread.join()
    for thread in threads:
        thread.join()
    return len(early), outcomes


def test_answers_that_arrive_together_share_a_commit_and_wait_for_it(
        settings: Settings, ledger: Engine, dispatcher: RecordingDispatcher) -> None:
    attempts = _attempts(settings, dispatcher, ANSWERS)
    sink = GroupCommitAnswers(ledger, "web_test")
    try:
        early, outcomes = _answer_all_while_held(settings, ledger, sink, attempts)
    finally:
        sink.close()
    assert early == 0  # nobody heard "saved" while nothing was committed
    assert len(outcomes) == ANSWERS and not any(isinstance(o, Exception) for o in outcomes)
    assert count_rows(ledger, answers) == ANSWERS
    assert sink.batches < ANSWERS  # the batch the committer held, then the answers that queued meanwhile


def test_control_ack_at_enqueue_acknowledges_before_the_commit(
        settings: Settings, ledger: Engine, dispatcher: RecordingDispatcher) -> None:
    """The control: the same check sees every answer acknowledged while the ledger had none."""
    attempts = _attempts(settings, dispatcher, ANSWERS)
    sink = AckAtEnqueue(ledger, "web_test")
    try:
        early, _outcomes = _answer_all_while_held(settings, ledger, sink, attempts, acknowledges_early=True)
    finally:
        sink.close()
    assert early == ANSWERS


def test_a_refused_answer_rolls_back_alone(settings: Settings, ledger: Engine,
                                           dispatcher: RecordingDispatcher) -> None:
    attempts = _attempts(settings, dispatcher, ANSWERS - 1) + ["no-such-attempt"]
    sink = GroupCommitAnswers(ledger, "web_test")
    try:
        _early, outcomes = _answer_all_while_held(settings, ledger, sink, attempts)
    finally:
        sink.close()
    refused = [o for o in outcomes if isinstance(o, AnswerRejected)]
    assert [r.reason for r in refused] == [AnswerRejected.UNKNOWN_ATTEMPT]
    assert count_rows(ledger, answers) == ANSWERS - 1


@pytest.mark.parametrize(("sink", "sink_type"), [("group-commit", GroupCommitAnswers), ("ack-at-enqueue", AckAtEnqueue)])
def test_the_node_takes_the_sink_the_settings_name(settings: Settings, ledger: Engine,
                                                   dispatcher: RecordingDispatcher, sink: str, sink_type: type) -> None:
    app = create_app(settings.with_overrides(answer_sink=sink), dispatcher=dispatcher)
    with TestClient(app) as client:
        assert type(app.state.proctor.answers) is sink_type
        token = token_for(client)
        reply = answer(client, token, start(client, token), "q1", "A", key="k-1")
    assert reply.status_code == 201
    assert not app.state.proctor.answers._thread.is_alive()  # the lifespan closed the committer
    assert count_rows(ledger, answers) == 1
