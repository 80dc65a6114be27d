"""The ramp without Locust: plan arithmetic, the student's calls, the history merge, the gate,
the error split, and the boundaries (nothing in chaos/ or stack/ imports Locust; pytest never
loads Locust's plugin). Every gate criterion is shown failing on a history built to break it."""

from __future__ import annotations

import ast
import contextlib
import json
import socket
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.analyze import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
from chaos.history import Op, read_history
from chaos.ramp.command import EXIT_LOAD_GATE, _ramp_parser, haproxy_counters, locust_argv, verdict_code
from chaos.ramp.gate import completions, error_split, gate, step_rates, time_series
from chaos.ramp.merge import merge_histories

ROOT = Path(__file__).resolve().parents[2]

from ramp_plan import RampPlan, parse_steps  # noqa: E402
from ramp_student import (HistoryWriter, RosterExhausted, SlotConnection, Student, StudentCursor,  # noqa: E402
                          classify, students_needed)


# ---------------------------------------------------------------- plan
def test_plan_sizes_users_from_the_target_rate_and_ends():
    plan = RampPlan(parse_steps("25,50,500"), step_seconds=10, per_user_rate=2)
    assert [s.users for s in plan.schedule()] == [13, 25, 250]
    assert plan.at(0).rate == 25 and plan.at(19.9).rate == 50 and plan.at(20).rate == 500
    assert plan.at(30) is None and plan.duration == 30


@pytest.mark.parametrize("text", ["", "25,abc", "25,0", "-5"])
def test_bad_steps_name_the_option(text):
    with pytest.raises(ValueError, match="--ramp-steps"):
        parse_steps(text)


def test_bad_pacing_names_the_option():
    with pytest.raises(ValueError, match="--ramp-per-user-rate"):
        RampPlan((25.0,), 10, 0)


# ---------------------------------------------------------------- student
class FakeResponse:
    def __init__(self, status: int, body: dict, node: str | None = "web_1", error: BaseException | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.status_code, self._body = status, body
        self.headers: dict[str, str] | None = {**({"X-Proctor-Node": node} if node else {}), **(headers or {})}
        if not status:  # as Locust's ErrorResponse: an ``error``, and no headers (None), when no response came
            self.error = error or ConnectionResetError("reset by peer")
            self.headers = None
        self.failed: str | None = None

    def json(self):
        return self._body

    def success(self):
        pass

    def failure(self, message):
        self.failed = message


class FakeClient:
    """Answers from a script, and records what was sent."""

    def __init__(self, script: list[FakeResponse]) -> None:
        self.script, self.sent = script, []

    @contextlib.contextmanager
    def request(self, method, path, json=None, headers=None, name=None, catch_response=True):
        self.sent.append((method, path, json, dict(headers or {})))
        yield self.script.pop(0)


def _options(**kw):
    base = dict(ramp_max_tries=3, ramp_polls=2, ramp_questions=1, ramp_seed=1)
    return SimpleNamespace(**{**base, **kw})


def test_student_retries_an_unknown_answer_under_the_same_key_as_a_new_process(tmp_path):
    history = HistoryWriter(tmp_path / "h.jsonl")
    student = Student("student-00001", "secret-code", "NOVA-101", __import__("random").Random(1), history, _options())
    client = FakeClient([FakeResponse(201, {"token": "t"}), FakeResponse(201, {"attempt_id": "a1"}),
                         FakeResponse(0, {}, node=None), FakeResponse(200, {"receipt_id": "r1"}),
                         FakeResponse(202, {}), FakeResponse(200, {"status": "ready"})])
    for _ in range(6):
        student.step(client)
    history.close()
    assert student.done
    answers = [sent for sent in client.sent if sent[0] == "PUT"]
    assert len(answers) == 2 and answers[0][3]["Idempotency-Key"] == answers[1][3]["Idempotency-Key"]
    ops = read_history(tmp_path / "h.jsonl").ops
    answer_ops = [op for op in ops if op.f == "answer"]
    assert [op.type for op in answer_ops] == ["invoke", "info", "invoke", "ok"]
    assert answer_ops[0].process == answer_ops[1].process != answer_ops[2].process
    assert answer_ops[1].error.startswith("ConnectionResetError") and answer_ops[3].node == "web_1"
    assert "secret-code" not in (tmp_path / "h.jsonl").read_text()  # access codes stay out of the history


class HTTPConnectionClosed(Exception):
    """Named as geventhttpclient's (which this process must not import: gevent)."""


def _closed() -> FakeResponse:
    """No response at all: the kept-alive connection was closed as the request went out."""
    return FakeResponse(0, {}, node=None, error=HTTPConnectionClosed("connection closed."))


def _student_ops(tmp_path: Path, script: list[FakeResponse], steps: int) -> tuple[FakeClient, list[Op]]:
    """``steps`` requests of one student through one slot (one ``SlotConnection``)."""
    history = HistoryWriter(tmp_path / "h.jsonl")
    student = Student("student-00001", "secret-code", "NOVA-101", __import__("random").Random(1), history, _options())
    client, connection = FakeClient(script), SlotConnection()
    for _ in range(steps):
        student.step(client, connection=connection)
    history.close()
    return client, read_history(tmp_path / "h.jsonl").ops


def test_a_request_its_reused_connection_closed_under_is_resent_once_in_the_same_operation(tmp_path):
    lost = _closed()
    client, ops = _student_ops(tmp_path, [FakeResponse(201, {"token": "t"}), lost, FakeResponse(201, {"attempt_id": "a1"})],
                               steps=2)
    starts = [sent for sent in client.sent if sent[1] == "/v1/attempts"]
    assert len(starts) == 2 and starts[0][3]["Idempotency-Key"] == starts[1][3]["Idempotency-Key"]
    start_ops = [op for op in ops if op.f == "start"]
    assert [op.type for op in start_ops] == ["invoke", "ok"]  # one operation, its outcome known
    assert start_ops[1].extra["resent"] == 1
    assert lost.failed is not None and "resent" in lost.failed  # Locust still counts the lost send
    assert error_split([op for op in ops if op.type != "invoke"])["resent"] == 1


def test_a_new_connection_closed_without_an_answer_stays_an_unknown_outcome(tmp_path):
    client, ops = _student_ops(tmp_path, [_closed(), FakeResponse(201, {"token": "t"})], steps=1)
    assert len(client.sent) == 1  # the slot's first request: the server's close, not a stale connection
    assert [op.type for op in ops] == ["invoke", "info"] and "resent" not in ops[1].extra


def test_a_reused_connection_closed_twice_is_resent_once_then_unknown(tmp_path):
    client, ops = _student_ops(tmp_path, [FakeResponse(201, {"token": "t"}), _closed(), _closed(), _closed()],
                               steps=2)
    assert len(client.sent) == 3  # the login, the start and its one resend
    assert [op.type for op in ops if op.f == "start"] == ["invoke", "info"]


def test_a_response_that_closes_its_connection_leaves_nothing_to_reuse(tmp_path):
    closing = FakeResponse(201, {"token": "t"}, headers={"Connection": "close"})
    client, ops = _student_ops(tmp_path, [closing, _closed(), FakeResponse(201, {"attempt_id": "a1"})],
                               steps=2)
    assert len(client.sent) == 2
    assert [op.type for op in ops if op.f == "start"] == ["invoke", "info"]


class Boom(Exception):
    pass


class RaisingClient(FakeClient):
    """Answers from a script, then raises from inside the request, as a broken client would."""

    @contextlib.contextmanager
    def request(self, method, path, json=None, headers=None, name=None, catch_response=True):
        if not self.script:
            raise Boom("the client broke")
        with super().request(method, path, json, headers, name, catch_response) as response:
            yield response


def test_a_send_that_raises_leaves_no_invoke_open_and_retries_as_a_new_process(tmp_path):
    history = HistoryWriter(tmp_path / "h.jsonl")
    student = Student("student-00001", "secret-code", "NOVA-101", __import__("random").Random(1), history, _options())
    client = RaisingClient([FakeResponse(201, {"token": "t"})])
    student.step(client)
    with pytest.raises(Boom):  # Locust still sees the exception
        student.step(client)
    client.script.append(FakeResponse(201, {"attempt_id": "a1"}))
    student.step(client)  # the same call again, as the slot that takes the student next would
    history.close()
    ops = read_history(tmp_path / "h.jsonl").ops
    starts = [op for op in ops if op.f == "start"]
    assert [op.type for op in starts] == ["invoke", "info", "invoke", "ok"]  # well-formed: every invoke completed
    assert starts[1].error == "Boom: the client broke" and starts[0].process == starts[1].process != starts[2].process
    assert starts[0].value == starts[2].value  # the same idempotency key


def test_the_cursor_hands_each_student_out_once_and_says_when_the_roster_is_used_up(tmp_path):
    roster = {f"student-{n}": f"code-{n}" for n in range(6)}
    options = _options(ramp_seed=1)
    history = HistoryWriter(tmp_path / "h.jsonl")
    processes = [StudentCursor(roster, "NOVA-101", offset, stride=2) for offset in range(2)]
    taken = [[cursor.next_student(options, history).student_id for _ in range(3)] for cursor in processes]
    assert sorted(taken[0] + taken[1]) == sorted(roster)  # each student once, the two processes disjoint
    with pytest.raises(RosterExhausted, match="one attempt each"):
        processes[0].next_student(options, history)
    history.close()


def test_students_needed_bounds_the_roster_a_plan_uses():
    assert students_needed(23 * 100, 20) == 100  # session + start + 20 answers + finish = 23 requests each
    assert students_needed(23 * 100 + 1, 20) == 101
    assert students_needed(23 * 100, 20, senders=400) == 500  # each sender can hold an unfinished student


def test_a_plan_offers_its_rates_for_its_steps_and_its_busiest_step_has_the_most_users():
    plan = RampPlan((20.0, 40.0), 6.0, 1.0)
    assert (plan.offered_requests, plan.most_users) == (360.0, 40)
    assert RampPlan((40.0, 20.0), 6.0, 2.0).most_users == 20  # the busiest step, not the last one


def test_a_definite_failure_ends_the_student():
    assert (classify(None), classify(503), classify(201), classify(409)) == ("info", "info", "ok", "fail")


# ---------------------------------------------------------------- merge
def _write(path: Path, ops: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(op) + "\n" for op in ops))


def _op(index, process, type_, f, wall, **kw):
    return {"index": index, "time": wall - 1000, "process": process, "type": type_, "f": f, "value": {}, "wall": wall,
            **kw}


def test_merge_interleaves_files_by_wall_time_and_keeps_processes_apart(tmp_path):
    _write(tmp_path / "histories/history-worker0-1.jsonl",
           [_op(0, 0, "invoke", "answer", 1000.0), _op(1, 0, "ok", "answer", 1000.3, latency=0.3)])
    _write(tmp_path / "histories/history-worker1-2.jsonl",
           [_op(0, 0, "invoke", "answer", 1000.1), _op(1, 0, "info", "answer", 1000.2, latency=0.1)])
    merged = merge_histories(tmp_path)
    assert merged.problems == [] and merged.ops == 4
    ops = read_history(tmp_path / "history.jsonl").ops
    assert [(op.type, op.extra["source"][8:15]) for op in ops] == [
        ("invoke", "worker0"), ("invoke", "worker1"), ("info", "worker1"), ("ok", "worker0")]
    assert ops[0].process != ops[1].process and ops[0].time == 0.0 and [op.index for op in ops] == [0, 1, 2, 3]


def test_merge_reports_a_torn_process_file(tmp_path):
    _write(tmp_path / "histories/history-local-1.jsonl", [_op(0, 0, "invoke", "answer", 1000.0)])
    with open(tmp_path / "histories/history-local-1.jsonl", "a") as out:
        out.write('{"index": 1, "ti')
    assert "torn" in merge_histories(tmp_path).problems[0]


# ---------------------------------------------------------------- gate
CONFIG = {"settle": 0.0, "gate": {"p99": 0.5, "max_failure_ratio": 0.01, "min_rate_ratio": 0.95},
          "plan": RampPlan((10.0, 20.0), 2.0, 2.0).to_dict()}
TICKS = [{"wall": 1000.0, "elapsed": 0.0, "target": 10.0}]


def _done(rates: tuple[int, int], latency: float = 0.05, status: int = 200, node: str | None = "web_1",
          slow_from: int | None = None) -> list[Op]:
    """Completions at the given per-second rate in each 2 s step; from index ``slow_from`` on, ``status``/``latency``."""
    ops, index = [], 0
    for step, rate in enumerate(rates):
        for i in range(rate * 2):
            bad = slow_from is not None and index >= slow_from
            wall = 1000.0 + step * 2 + i / rate
            ops.append(Op(index, wall - 1000, index, "ok" if not bad or status < 300 else ("fail" if status < 500 else "info"),
                          "answer", {}, status=status if bad else 200, node=node if bad else "web_1",
                          latency=latency if bad else 0.05, extra={"wall": wall}))
            index += 1
    return ops


def _criteria(done):
    return {g["name"]: g["passed"] for g in gate(CONFIG, step_rates(CONFIG, TICKS, done), done)}


def test_a_healthy_history_keeps_every_criterion():
    assert _criteria(_done((10, 20))) == {"p99_seconds": True, "failure_ratio": True, "achieved_rate_ratio": True}


def test_a_slowed_endpoint_breaks_the_p99_criterion_only():
    assert _criteria(_done((10, 20), latency=2.0, slow_from=50)) == {
        "p99_seconds": False, "failure_ratio": True, "achieved_rate_ratio": True}


def test_a_failing_endpoint_breaks_the_failure_ratio_only():
    assert _criteria(_done((10, 20), status=500, slow_from=55)) == {
        "p99_seconds": True, "failure_ratio": False, "achieved_rate_ratio": True}


def test_a_sagging_rate_breaks_the_achieved_rate_criterion_only():
    steps = step_rates(CONFIG, TICKS, _done((10, 15)))
    assert [s["achieved"] for s in steps] == [10.0, 15.0]
    assert _criteria(_done((10, 15))) == {"p99_seconds": True, "failure_ratio": True, "achieved_rate_ratio": False}


def _open_done(offered: tuple[int, int], served: tuple[int, int]) -> list[Op]:
    """Open model: ``offered`` intended starts per second in each 2 s step, of which the first
    ``served`` per second completed 0.05 s after their start; the rest completed after the ramp."""
    ops, index = [], 0
    for step, (rate, kept) in enumerate(zip(offered, served)):
        for i in range(rate * 2):
            intended = 1000.0 + step * 2 + i / rate
            wall = intended + 0.05 if i < kept * 2 else 1010.0
            ops.append(Op(index, wall - 1000, index, "ok", "answer", {}, status=200, node="web_1", latency=0.05,
                          extra={"wall": wall, "intended": intended, "corrected_latency": wall - intended}))
            index += 1
    return sorted(ops, key=lambda op: op.extra["wall"])


OPEN = {**CONFIG, "arrivals": {"mode": "open"}, "gate": {**CONFIG["gate"], "p99": 20.0}}


def test_open_model_rate_is_judged_against_the_offered_arrivals():
    # The schedule drew 9 of the 10 req/s and 18 of the 20, and the stack served every one.
    steps = step_rates(OPEN, TICKS, _open_done((9, 18), (9, 18)))
    assert [(s["offered"], s["ratio"]) for s in steps] == [(9.0, 1.0), (18.0, 1.0)]
    assert {g["name"]: g["passed"] for g in gate(OPEN, steps, [])}["achieved_rate_ratio"]


def test_open_model_stall_after_a_served_step_breaks_the_rate_criterion():
    # Step 0 served what was offered; in step 1 only 12 of 20 req/s completed in the window.
    done = _open_done((10, 20), (10, 12))
    steps = step_rates(OPEN, TICKS, done)
    assert [(s["offered"], s["achieved"], s["ratio"]) for s in steps] == [(10.0, 10.0, 1.0), (20.0, 12.0, 0.6)]
    assert not {g["name"]: g["passed"] for g in gate(OPEN, steps, done)}["achieved_rate_ratio"]


def test_closed_model_rate_is_judged_against_the_target():
    steps = step_rates(CONFIG, TICKS, _open_done((9, 18), (9, 18)))
    assert [(s["offered"], s["ratio"]) for s in steps] == [(10.0, 0.9), (20.0, 0.9)]


def test_no_completion_is_never_a_pass():
    assert set(_criteria([]).values()) == {False}


def test_exit_code_puts_invariants_before_the_load_gate():
    held, broke = [{"passed": True}], [{"passed": True}, {"passed": False}]
    assert verdict_code(True, [], held) == EXIT_VALID
    assert verdict_code(True, [], broke) == EXIT_LOAD_GATE
    assert verdict_code(False, [], broke) == EXIT_INVALID
    assert verdict_code("unknown", [], held) == EXIT_UNKNOWN
    assert verdict_code(True, ["history-local-1.jsonl: torn"], held) == EXIT_UNKNOWN


# ---------------------------------------------------------------- error split
def test_errors_split_by_layer_and_node():
    done = [Op(0, 0, 0, "info", "answer", {}, status=503, node=None, latency=5.0, extra={"wall": 1000.1}),
            Op(1, 0, 1, "info", "answer", {}, status=500, node="web_2", latency=0.1, extra={"wall": 1000.2}),
            Op(2, 0, 2, "info", "answer", {}, status=None, error="ReadTimeout: timed out", extra={"wall": 1000.3}),
            Op(3, 0, 3, "fail", "finish", {}, status=403, node="web_1", extra={"wall": 1000.4}),
            Op(4, 0, 4, "ok", "answer", {}, status=201, node="web_1", latency=0.1, extra={"wall": 1000.5})]
    split = error_split(done)
    assert split["layers"] == {"load_balancer": 1, "application": 1, "client": 1, "rejected": 1}
    assert split["by_node"] == {"(load balancer)": {"503": 1}, "web_2": {"500": 1}}
    assert split["client"] == {"ReadTimeout": 1} and split["rejected"] == {"finish 403": 1}
    series = time_series(TICKS, done)
    assert series["load_balancer"] == [1.0] and series["application"] == [1.0] and series["achieved"] == [5.0]


def test_completions_leave_out_invokes_and_monitor_ops():
    ops = [Op(0, 0, 0, "invoke", "answer", {}), Op(1, 0, "monitor", "info", "sample", {}),
           Op(2, 0, 0, "ok", "answer", {}, extra={"wall": 1.0})]
    assert [op.index for op in completions(ops)] == [2]


# ---------------------------------------------------------------- proctor ramp / boundaries
def test_proctor_ramp_runs_locust_headless_and_binds_a_distributed_master_to_loopback():
    args = _ramp_parser().parse_args(["--steps", "25,50", "--processes", "2"])
    argv = locust_argv(args, ["--loglevel", "WARNING"])
    assert argv[1:3] == ["-m", "locust"] and "--headless" in argv and argv[-2:] == ["--loglevel", "WARNING"]
    assert argv[argv.index("--master-bind-host") + 1] == "127.0.0.1" and "25,50" in argv


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_in_chaos_or_stack_imports_locust_or_gevent():
    offenders = [str(p.relative_to(ROOT)) for folder in ("chaos", "stack") for p in sorted((ROOT / folder).rglob("*.py"))
                 if _imports(p) & {"locust", "gevent"}]
    assert offenders == []


def _modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


# The one stack module the Locust side may import: the run-folder rule, standard library only
# (checked below), so nothing of the stack's threads or I/O libraries runs under gevent.
GEVENT_SAFE = {"stack.paths", "stack.ledger.grading", "chaos.ops.answers"}  # standard library only (the next test); the package inits are empty


def test_the_locustfile_side_imports_no_stack_or_harness_code():
    for name in ("exam_ramp.py", "ramp_plan.py", "ramp_stack.py", "ramp_student.py"):
        ours = {m for m in _modules(ROOT / "loadtests" / name) if m.split(".")[0] in {"chaos", "stack"}}
        assert ours <= GEVENT_SAFE, (name, ours - GEVENT_SAFE)


def test_the_gevent_safe_stack_modules_import_only_the_standard_library():
    for module in GEVENT_SAFE:
        path = ROOT / (module.replace(".", "/") + ".py")
        tops = {m.split(".")[0] for m in _modules(path)}
        assert tops <= set(sys.stdlib_module_names) | {"__future__"}, (module, tops)


def test_the_boundary_walk_sees_an_import_when_there_is_one(tmp_path):
    sample = tmp_path / "bad.py"
    sample.write_text("def f():\n    from locust import task\n")
    assert "locust" in _imports(sample)


def test_pytest_runs_without_locusts_plugin_and_without_gevent(pytestconfig):
    assert not pytestconfig.pluginmanager.has_plugin("locust")
    assert "gevent" not in sys.modules and "locust" not in sys.modules


# ---------------------------------------------------------------- HAProxy's own counters
SHOW_STAT = """# pxname,svname,qcur,qmax,scur,hrsp_5xx,econ,eresp,ereq,dreq,wretr,wredis,cli_abrt,srv_abrt
api,FRONTEND,,,3,150,,,0,0,,,,
web,web_1,0,40,1,5,2,1,,,3,1,0,0
web,web_2,0,35,1,2,0,0,,,0,0,0,0
web,BACKEND,0,75,2,150,2,1,,0,3,1,0,0
"""


def _serve_once(path: Path, reply: str) -> threading.Thread:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def answer() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(reply.encode())

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


def test_haproxy_counters_separate_its_own_5xx_from_the_nodes(tmp_path):
    thread = _serve_once(tmp_path / "admin.sock", SHOW_STAT)
    counters = haproxy_counters(str(tmp_path / "admin.sock"))
    thread.join(5)
    assert counters["load_balancer_own_5xx"] == 150 - 5 - 2  # the frontend's 5xx less those the servers answered
    assert counters["web/web_1"]["econ"] == 2 and counters["web/BACKEND"]["qmax"] == 75


def test_haproxy_counters_say_why_when_the_socket_is_gone(tmp_path):
    assert "show stat failed" in haproxy_counters(str(tmp_path / "missing.sock"))["note"]
    assert haproxy_counters("") == {"note": "no HAProxy stats socket given"}


def test_the_reproduce_line_is_the_locust_command_as_it_was_given() -> None:
    """Locust's own argv already names the locustfile: the line used to say ``-f`` twice."""
    from chaos.ramp.command import reproduce_command

    argv = ["-f", "loadtests/exam_ramp.py", "--headless", "--host", "http://127.0.0.1:8080", "--ramp-roster",
            "/tmp/a roster.json"]
    assert reproduce_command(argv) == ("locust -f loadtests/exam_ramp.py --headless --host http://127.0.0.1:8080 "
                                       "--ramp-roster '/tmp/a roster.json'")
    assert reproduce_command([]) == "locust -f loadtests/exam_ramp.py"
