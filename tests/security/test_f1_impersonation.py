"""Finding 1 (critical): anyone could impersonate any student.

The attack: POST /v1/sessions with a victim's student_id and no credential, then replay the
victim's predictable start key (``start-<student_id>``) to get the victim's attempt, then use
replay-versus-409 on answers as an oracle. Now a session needs the roster access code, a bad
pair gets one 401 that never says which half was wrong, and a start key only ever names the
authenticated student's own attempts.
"""

from __future__ import annotations

import uuid

from web_support import ROSTER, TestClient, answer, auth, start, token_for

VICTIM, ATTACKER = "s-1", "s-2"


def _login(client: TestClient, student: str, code: str | None, exam: str = "NOVA-101"):  # type: ignore[no-untyped-def]
    body = {"student_id": student, "exam_code": exam}
    if code is not None:
        body["access_code"] = code
    return client.post("/v1/sessions", json=body)


def test_a_session_without_the_access_code_is_refused(app_client: TestClient) -> None:
    assert _login(app_client, VICTIM, None).status_code == 422  # the credential is required
    assert _login(app_client, VICTIM, "guess").status_code == 401
    assert _login(app_client, VICTIM, ROSTER["NOVA-101"][ATTACKER]).status_code == 401  # another's code
    # Control: the victim's own code opens the victim's session, so the refusals above are the code's doing.
    assert _login(app_client, VICTIM, ROSTER["NOVA-101"][VICTIM]).status_code == 201


def test_a_bad_pair_never_says_which_half_was_wrong(app_client: TestClient) -> None:
    wrong_code = _login(app_client, VICTIM, "A" * 22)
    unknown_student = _login(app_client, "s-nobody", "A" * 22)
    unknown_exam = _login(app_client, VICTIM, ROSTER["NOVA-101"][VICTIM], exam="NOVA-999")
    replies = {(r.status_code, r.text, r.headers.get("www-authenticate")) for r in (wrong_code, unknown_student, unknown_exam)}
    assert len(replies) == 1 and next(iter(replies))[0] == 401


def test_access_codes_carry_128_bits_and_are_stored_only_as_a_keyed_hash(app_client: TestClient, ledger) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from stack.ledger.roster import CODE_BYTES, code_hmac
    from stack.ledger.schema import roster

    assert CODE_BYTES * 8 >= 128
    codes = ROSTER["NOVA-101"]
    assert len(set(codes.values())) == len(codes)
    with ledger.connect() as conn:
        stored = dict(conn.execute(select(roster.c.student_id, roster.c.code_hmac).where(roster.c.exam_code == "NOVA-101")).all())
    assert all(code not in stored.values() for code in codes.values())  # never the code itself
    assert stored[VICTIM] == code_hmac("test-roster-key", codes[VICTIM])
    assert stored[VICTIM] != code_hmac("another-run's-key", codes[VICTIM])  # keyed: useless without the run's key


def test_replaying_the_victims_start_key_gives_the_attacker_only_their_own_attempt(app_client: TestClient) -> None:
    victim = token_for(app_client, VICTIM)
    victim_attempt = start(app_client, victim, key=f"start-{VICTIM}")
    assert answer(app_client, victim, victim_attempt, "q1", "C", key="k-victim").status_code == 201
    attacker = token_for(app_client, ATTACKER)
    replay = app_client.post("/v1/attempts", headers=auth(attacker) | {"Idempotency-Key": f"start-{VICTIM}"})
    assert replay.status_code == 201 and replay.json()["attempt_id"] != victim_attempt  # a new attempt, the attacker's
    # No oracle: the victim's attempt refuses the attacker before any replay/409 logic runs.
    for guess in "ABCD":
        probe = answer(app_client, attacker, victim_attempt, "q1", guess, key="k-victim")
        assert probe.status_code == 404
    assert app_client.get(f"/v1/attempts/{victim_attempt}/merit-card", headers=auth(attacker)).status_code == 404
    # Control: the victim's own replay of the same answer is still recognised.
    assert answer(app_client, victim, victim_attempt, "q1", "C", key="k-victim").status_code == 200


def test_attempt_ids_are_not_guessable(app_client: TestClient) -> None:
    token = token_for(app_client)
    ids = {start(app_client, token) for _ in range(20)}
    assert len(ids) == 20 and all(uuid.UUID(hex=i).version == 4 for i in ids)  # 122 random bits each
