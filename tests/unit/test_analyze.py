"""analyze() end to end on run folders built here, and check_command's exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import chaos.analyze as analyze_module
import chaos.plots.run as plots_module
import chaos.report as report_module
from chaos.analyze import analyze, check_command, check_main
from chaos.checkers.answers import fingerprint
from chaos.history import History
from chaos.report import format_seconds

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPRODUCE = "proctor run kill-merit-worker --seed 7 --time-scale 0.01"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def export(table: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"table": table, "exported_at": 200.0, "rows": rows}


FAULT = {"at": 0.5, "kind": "kill", "target": "worker_merit_1", "duration": 1.0, "wait_busy": 1.0}
CARD = {"attempt_id": "a1", "student_id": "s1", "exam_code": "NOVA-101", "score": 1, "max_score": 3, "position": 1,
        "ranked_against": ["a1"], "finished_attempts": 1, "computed_at": 101.4}
SMS = {"message_id": "msg_1", "to": "student:s1", "body": "NOVA-101: you scored 1/3, position 1."}
NARRATIVE = {"narrative_id": "nar_1", "text": "a1 placed #1"}


def write_history(folder: Path) -> None:
    """A small finished exam: sign-in, start, two answers, a finish; a merit-worker kill and its heal."""
    clock = Clock()
    with History(folder / "history.jsonl", clock=clock) as history:
        for n, (f, value) in enumerate(
            [
                ("session", {"student_id": "s1"}),
                ("start", {"student_id": "s1", "idempotency_key": "start-s1"}),
                ("answer", {"attempt_id": "a1", "question": "q1", "content": "B", "idempotency_key": "k1"}),
                ("answer", {"attempt_id": "a1", "question": "q2", "content": "C", "idempotency_key": "k2"}),
                ("finish", {"attempt_id": "a1", "idempotency_key": "f1"}),
            ]
        ):
            clock.now += 0.5
            invoked = history.invoke(1, f, value)
            clock.now += 0.05
            history.complete(invoked, "ok", status=201, node="web_1", receipt_id=f"r{n - 2}" if f == "answer" else None)
            if n == 2:
                history.nemesis("fault-start", {"fault_id": 0, **FAULT, "mid_job": True, "pids": [41]})
                history.sample({"lanes": {"merit": {"depth": 1, "oldest_age": 0.3}, "ai": {"depth": 0, "oldest_age": 0}}})
        clock.now += 1
        history.nemesis("fault-end", {"fault_id": 0, **FAULT, "restarted": True})
        history.sample({"lanes": {"merit": {"depth": 0, "oldest_age": 0}, "ai": {"depth": 0, "oldest_age": 0}}})


def write_ledgers(folder: Path, lose_answer: bool) -> None:
    answers = [
        {"receipt_id": f"r{n}", "attempt_id": "a1", "student_id": "s1", "question": q, "content": c,
         "idempotency_key": f"k{n + 1}", "node": "web_1", "created_at": 100.0}
        for n, (q, c) in enumerate([("q1", "B"), ("q2", "C")])
    ]
    kinds = ("merit", "narrative", "sms")
    payloads = {"merit": CARD, "sms": SMS, "narrative": {**NARRATIVE, "score": 1, "position": 1}}
    ai_request = {"operation_id": "narrative-a1", "attempt_id": "a1", "score": 1, "position": 1}
    ledgers = {
        "exams": export("exams", [{"exam_code": "NOVA-101", "question_count": 3, "answer_key": {"q1": "B", "q2": "D", "q3": "A"}}]),
        "attempts": export("attempts", [{"attempt_id": "a1", "student_id": "s1", "exam_code": "NOVA-101", "status": "finished", "started_at": 99.0, "finished_at": 101.0}]),
        "answers": export("answers", answers[1:] if lose_answer else answers),
        "outbox": export("outbox", [
            {"operation_id": f"{k}-a1", "attempt_id": "a1", "kind": k, "status": "done", "attempts": 1, "job_id": f"{k}-a1-1",
             "last_error": None, "created_at": 101.0, "enqueued_at": 101.1, "done_at": 101.5} for k in kinds
        ]),
        "outcomes": export("outcomes", [
            {"id": i, "operation_id": f"{k}-a1", "attempt_id": "a1", "kind": k, "status": "ready", "payload": payloads[k], "created_at": 101.5}
            for i, k in enumerate(kinds)
        ]),
        "ai_effects": {"provider": "ai", "exported_at": 200.0, "effects": [{"id": 1, "operation_id": "narrative-a1", "idempotency_key": "narrative-a1", "created_at": 101.3,
                                                                            "request": ai_request, "response": {**NARRATIVE, "operation_id": "narrative-a1", "attempt_id": "a1"}}],
                       "refusals": []},
        "sms_effects": {"provider": "sms", "exported_at": 200.0, "effects": [{"id": 1, "operation_id": "sms-a1", "idempotency_key": "sms-a1", "created_at": 101.4,
                                                                              "request": {"operation_id": "sms-a1", "to": SMS["to"], "body": SMS["body"]}, "response": SMS}],
                        "refusals": []},
        "ai_reservations": export("ai_reservations", [{"call_id": "narrative-a1#1", "operation_id": "narrative-a1", "state": "completed",
                                                       "cost": 1.0, "reserved_at": 101.2, "settled_at": 101.4, "note": "provider answered"}]),
        "audit_log": export("audit_log", []),
        "alerts": export("alerts", []),
        "lane_state": export("lane_state", []),
    }
    (folder / "ledgers").mkdir()
    for table, document in ledgers.items():
        (folder / "ledgers" / f"{table}.json").write_text(json.dumps(document))


def build_run(folder: Path, *, lose_answer: bool = False, options: dict[str, Any] | None = None) -> Path:
    write_history(folder)
    write_ledgers(folder, lose_answer)
    scenario = {
        "name": "kill-merit-worker",
        "seed": 7,
        "time_scale": 0.01,
        "settings": {"TIME_SCALE": "0.01", "PROCTOR_MAX_JOB_ATTEMPTS": "5"},
        "case_constants": {"CASE_AI_CALL_SECONDS": 10.0, "CASE_RETRY_WINDOW_SECONDS": 43200.0},  # the runner records them
        "options": options if options is not None else {"outcome_deadline_seconds": 5, "slo": {"answer": {"p99": 1.0}}},
        "description": "SIGKILL the merit worker mid-job",
        "started_at": 1800000000.0,  # the runner writes epoch seconds
        "ended_at": "2027-01-15T08:00:05+00:00",
        "workload": {"arrival_rate": 2},  # extra keys are the runner's business: ignored
        "faults": [FAULT],
        "reproduce": REPRODUCE,
    }
    (folder / "scenario.json").write_text(json.dumps(scenario))
    return folder


def test_all_is_exact() -> None:
    assert sorted(analyze_module.__all__) == sorted(
        ["EXIT_INVALID", "EXIT_UNKNOWN", "EXIT_VALID", "HISTORY_FILE", "NotARunFolder", "SCENARIO_FILE",
         "ScenarioError", "analyze", "require_run_folder",
         "check_command", "check_main", "exit_code", "load_scenario"]
    )
    assert sorted(report_module.__all__) == sorted(
        ["REPORT_JSON", "REPORT_MD", "build_report", "case_durations", "check_word", "format_seconds",
         "headline_counts", "render_markdown",
         "verdict_word", "write_report"]
    )
    assert sorted(plots_module.__all__) == sorted(["PLOT_FILES", "load_end", "plot_latency", "plot_queues", "plot_run",
                                                   "plot_throughput"])


def test_valid_run_writes_report_and_plots_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path)
    assert check_command(run) == 0
    assert capsys.readouterr().out == f"VALID\nreport: {run / 'report.md'}\n"
    report = json.loads((run / "report.json").read_text())
    assert (report["verdict"], report["valid"], report["name"], report["seed"], report["reproduce"]) == ("VALID", True, "kill-merit-worker", 7, REPRODUCE)
    # 8 of the 18 had nothing to judge in this small run (no revisions, no connection samples,
    # no pause, no refusal, no egress address, no logs shipped): counted apart, not as valid (issue #27).
    assert report["summary"] == {"valid": 10, "invalid": 0, "unknown": 0, "n/a": 8}
    assert {n: c["valid"] for n, c in report["checkers"].items()} == dict.fromkeys(
        ["stats", "faults", "answers", "revisions", "final_answers", "answer_reads", "effects", "jobs", "payloads",
         "latency", "connections", "provider_limit", "duplicate_charges", "billing", "paused_calls", "retry_after", "egress", "logship"], True)
    assert report["checkers"]["answers"]["counts"]["acknowledged"] == 2
    assert report["checkers"]["stats"]["counts"]["faults"] == 1
    assert report["options"]["outcome_deadline_seconds"] == 5.0
    assert report["plots"] == ["throughput.png", "latency.png", "queues.png", "digest.png", "ai_lane.png"]  # an AI call
    for name in report["plots"]:
        assert (run / name).read_bytes()[:8] == PNG_MAGIC
    assert "Plots not drawn" not in (run / "report.md").read_text()
    ai_call = next(d for d in report["case_durations"] if d["name"] == "CASE_AI_CALL_SECONDS")
    assert ai_call == {"name": "CASE_AI_CALL_SECONDS", "case_seconds": 10.0, "real_seconds": 0.1}


def test_report_md_shows_verdict_settings_both_times_and_reproduce(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    analyze(run, plots=False)
    md = (run / "report.md").read_text()
    assert "**Verdict: VALID** (10 valid, 8 n/a, 0 invalid, 0 unknown)" in md
    assert "| revisions | n/a | no answer revisions in the history: nothing to check |" in md
    assert REPRODUCE in md
    assert "SIGKILL the merit worker mid-job\n\nSeed `7`, started 2027-01-15T08:00:00+00:00, ended 2027-01-15T08:00:05+00:00." in md
    assert "TIME_SCALE = 0.01 (real seconds per case second)" in md
    assert "| CASE_AI_CALL_SECONDS | 10 s | 100 ms |" in md
    assert "| CASE_RETRY_WINDOW_SECONDS | 12 h | 7.2 min |" in md
    assert "| PROCTOR_MAX_JOB_ATTEMPTS | `5` |" in md
    assert "- outcome_deadline_seconds: 5 s real = 8.33 min case" in md
    assert "- slo answer: p99 1 s real = 100 s case" in md
    assert "| op answer | 2 | 50 ms | 50 ms | 50 ms | 50 ms | | |" in md
    assert "| lane merit (finish to done) | 1 | 500 ms | 500 ms | 500 ms | 500 ms | 400 ms | 300 ms |" in md
    assert "retried_keys **0**, retries **0**, duplicate_sends **0**, faults **1**" in md  # the stats line
    assert "\n\n\n" not in md


def test_lost_answer_exits_1_and_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path, lose_answer=True)
    assert check_command(run, plots=False) == 1
    # The lost answer was the right one: the merit card's score no longer matches what was kept.
    assert capsys.readouterr().out.splitlines()[0] == "INVALID: answers (lost=1); payloads (score_mismatch=1)"
    report = json.loads((run / "report.json").read_text())
    answers = report["checkers"]["answers"]
    assert answers["examples"]["lost"] == [{"attempt_id": "a1", "question": "q1", "content": fingerprint("B")}]
    assert "| answers | INVALID | lost 1 |" in (run / "report.md").read_text()


def test_unread_ledger_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path)
    (run / "ledgers" / "sms_effects.json").unlink()
    assert check_command(run, plots=False) == 2
    assert capsys.readouterr().out.splitlines()[0].startswith("UNKNOWN: effects (unknown: ledger sms_effects was not read")


def test_missing_history_is_unknown_not_vacuous(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    (run / "history.jsonl").unlink()
    report = analyze(run)  # plots on: an empty history must still plot
    assert report["valid"] == "unknown"
    assert list(report["checkers"]) == ["history"]
    assert report["checkers"]["history"]["notes"][0].startswith("history could not be read: FileNotFoundError")
    assert all((run / name).read_bytes()[:8] == PNG_MAGIC for name in report["plots"])


def test_empty_history_is_unknown_and_plots_do_not_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path)
    (run / "history.jsonl").write_text("")
    report = analyze(run)
    assert report["valid"] == "unknown"
    assert list(report["checkers"]) == ["history"]  # no false "unexpected" rows against an empty history
    assert report["checkers"]["history"]["notes"] == ["history.jsonl is empty: nothing was recorded, so nothing can be judged"]
    assert len(report["plots"]) == 5  # throughput, latency, queues, digest, and ai_lane: the ledgers hold an AI call
    assert check_command(run, plots=False) == 2


def test_torn_last_line_is_unknown_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path)
    lines = (run / "history.jsonl").read_text().splitlines()
    torn = lines[-1][: len(lines[-1]) // 2]
    (run / "history.jsonl").write_text("\n".join(lines[:-1] + [torn]))
    assert check_command(run, plots=False) == 2
    assert capsys.readouterr().out.splitlines()[0].startswith(
        f"UNKNOWN: history (unknown: history.jsonl line {len(lines)} is torn ({len(torn.encode())} bytes, JSONDecodeError")
    report = json.loads((run / "report.json").read_text())
    assert report["checkers"]["answers"]["valid"] is True  # what is there is still judged
    assert f"line {len(lines)} is torn" in (run / "report.md").read_text()


def drop_history_lines(run: Path, f: str) -> None:
    lines = (run / "history.jsonl").read_text().splitlines(keepends=True)
    (run / "history.jsonl").write_text("".join(line for line in lines if json.loads(line)["f"] != f))


def test_a_fault_never_healed_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path)
    drop_history_lines(run, "fault-end")
    assert check_command(run, plots=False) == 1
    assert capsys.readouterr().out.splitlines()[0] == "INVALID: faults (unhealed=1)"


def test_declared_faults_that_never_happened_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path)
    drop_history_lines(run, "fault-start")
    drop_history_lines(run, "fault-end")
    assert check_command(run, plots=False) == 1
    assert capsys.readouterr().out.splitlines()[0] == "INVALID: faults (not_injected=1)"


def test_a_changed_sms_recipient_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path)
    path = run / "ledgers" / "outcomes.json"
    document = json.loads(path.read_text())
    document["rows"][2]["payload"]["to"] = "student:s2"
    path.write_text(json.dumps(document))
    assert check_command(run, plots=False) == 1
    assert capsys.readouterr().out.splitlines()[0] == "INVALID: payloads (sms_mismatch=1)"


def test_max_connects_per_process_is_read_from_scenario_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run(tmp_path, options={"max_connects_per_process": 3})
    processes = {"worker_merit": {"connects": 9, "errors": {}, "error_total": 0, "pids": 1, "max_process_connects": 9}}
    sample = {"index": 99, "time": 9.0, "process": "monitor", "type": "info", "f": "valkey-sample",
              "value": {"ok": True, "total_connections_received": 9, "rejected_connections": 0, "clients": {}, "processes": processes}}
    with open(run / "history.jsonl", "a") as history:
        history.write(json.dumps(sample) + "\n")
    assert check_command(run, plots=False) == 1
    assert capsys.readouterr().out.splitlines()[0] == "INVALID: connections (process_connects_over_limit=1)"
    report = json.loads((run / "report.json").read_text())
    assert report["options"]["max_connects_per_process"] == 3
    scenario = json.loads((run / "scenario.json").read_text())
    scenario["options"]["max_connects_per_process"] = 9  # the same run under a limit it keeps
    (run / "scenario.json").write_text(json.dumps(scenario))
    assert check_command(run, plots=False) == 0


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda run: (run / "scenario.json").write_text('{"options": {"allow_pending": ["ai"]}}'), "OptionsError"),
        (lambda run: (run / "scenario.json").write_text("{"), "ScenarioError"),
        (lambda run: (run / "scenario.json").write_text('{"time_scale": 0}'), "ScenarioError"),
    ],
)
def test_harness_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], breakage: Any, message: str) -> None:
    run = build_run(tmp_path)
    breakage(run)
    assert check_command(run, plots=False) == 2
    assert f"harness error: {message}" in capsys.readouterr().err


def test_missing_run_folder_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_main([str(tmp_path / "nope"), "--no-plots"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_missing_scenario_uses_defaults_and_says_so(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    (run / "scenario.json").unlink()
    report = analyze(run, plots=False)
    # Without scenario.json nobody can say what chaos was declared, nor how long a case-minute
    # was (the AI provider's limit window): not a pass.
    assert report["valid"] == "unknown"
    assert [n for n, c in report["checkers"].items() if c["valid"] is not True] == ["faults", "provider_limit"]
    assert report["harness_notes"] == ["scenario.json not found: default options used", "no time_scale in scenario.json: assumed 0.01"]
    assert "(scenario.json has no reproduce command)" in (run / "report.md").read_text()
    assert report["plots"] == [] and report["plots_drawn"] is False
    assert "Plots not drawn in this judgement" in (run / "report.md").read_text()  # and says how to draw them


@pytest.mark.parametrize("seconds, text", [(0.0034, "3.4 ms"), (0.34, "340 ms"), (10, "10 s"), (450, "7.5 min"), (43200, "12 h"), (None, "-")])
def test_format_seconds(seconds: float | None, text: str) -> None:
    assert format_seconds(seconds) == text


def _derive_merit_bound(run: Path, *, came_back: bool) -> None:
    """Ask for the derived merit bound, and make the run's kill end with or without a ready worker."""
    scenario = json.loads((run / "scenario.json").read_text())
    scenario.update(derive_bounds=["slo.merit.oldest_age"], stack={"merit_workers": 1})
    (run / "scenario.json").write_text(json.dumps(scenario))
    lines = []
    for line in (run / "history.jsonl").read_text().splitlines():
        op = json.loads(line)
        if op["f"] == "fault-start":
            op["value"]["killed_at"] = 101.0
        elif op["f"] == "fault-end":
            op["value"].update(ready=came_back, **({"ready_at": 101.2} if came_back else {}))
        lines.append(json.dumps(op))
    (run / "history.jsonl").write_text("\n".join(lines) + "\n")


def test_an_underivable_bound_is_unknown_never_a_silent_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    back = build_run(tmp_path / "back")
    _derive_merit_bound(back, came_back=True)
    assert check_command(back, plots=False) == 0  # the control: the same run with the worker back is valid
    capsys.readouterr()
    gone = build_run(tmp_path / "gone")
    _derive_merit_bound(gone, came_back=False)
    assert check_command(gone, plots=False) == 2
    out = capsys.readouterr().out
    assert "slo.merit.oldest_age could not be derived" in out and "never came back" in out
