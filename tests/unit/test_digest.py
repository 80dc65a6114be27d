"""`proctor digest` (chaos/digest/command.py) on hand-written /metrics text: parse, screen, rates."""

from __future__ import annotations

import json
import os

import pytest

from chaos.digest.command import NodeScrape, digest_main, parse_metrics, render_digest
from stack.embedded.watchdog import identity

FINISH = 'proctor_http_request_duration_seconds_count{method="POST",node="web_1",route="/v1/attempts/{attempt_id}/finish"}'


def _node(finishes: float, failed_ai: float = 0.0) -> NodeScrape:
    text = f"""# HELP proctor_http_requests_total HTTP requests served by this node.
# TYPE proctor_http_requests_total counter
proctor_http_requests_total{{node="web_1"}} 120.0
proctor_http_5xx_total{{node="web_1"}} 2.0
proctor_lane_depth{{lane="merit"}} 0.0
proctor_lane_depth{{lane="ai"}} 1990.0
proctor_lane_oldest_job_age_seconds{{lane="ai"}} 95.5
proctor_lane_failed_jobs{{lane="ai"}} {failed_ai}
proctor_pending_outcomes 4010.0
proctor_outbox_lag_seconds 130.25
{FINISH} {finishes}
"""
    return NodeScrape("http://127.0.0.1:1", samples=parse_metrics(text))


def test_parse_reads_names_labels_and_values() -> None:
    samples = parse_metrics('a_total{node="web_1",route="/v1/x/{id}"} 3.0\n# TYPE a counter\nb NaN\n')
    assert samples[0] == ("a_total", {"node": "web_1", "route": "/v1/x/{id}"}, 3.0)
    assert samples[1][0] == "b"


def test_one_screen_shows_what_on_call_watches() -> None:
    screen = render_digest([_node(10, failed_ai=3)])
    assert "1990" in screen and "95.5 s" in screen and "4010" in screen and "130.25 s" in screen
    ai_row = next(line for line in screen.splitlines() if line.startswith("ai "))
    assert ai_row.split() == ["ai", "1990", "95.5", "s", "3", "n/a"]  # n/a: no narrative done yet
    assert " 120 " in screen
    assert "exam lock n/a" in screen and "rates: n/a" in screen


def test_rates_come_from_the_histogram_counts_between_two_screens() -> None:
    screen = render_digest([_node(40)], before=[_node(10)], interval=30.0)
    assert "finishes 60/min" in screen


def test_an_unreachable_node_is_shown_not_skipped() -> None:
    down = NodeScrape("http://127.0.0.1:9", error="ConnectError: refused")
    assert "unreachable: ConnectError" in render_digest([down, _node(1)])


def test_bad_options_name_themselves(tmp_path, monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    # an empty results folder of its own: the suite's other workers run stacks under the shared one
    monkeypatch.setenv("PROCTOR_RESULTS_DIR", str(tmp_path))
    with pytest.raises(SystemExit):
        digest_main(["--url", "http://127.0.0.1:9", "--watch", "0"])
    assert "--watch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        digest_main([])
    assert "--url" in capsys.readouterr().err


def test_without_a_run_folder_it_reads_the_one_running_stack(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PROCTOR_RESULTS_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as none_running:
        digest_main([])
    assert none_running.value.code == 2 and "proctor up" in capsys.readouterr().err
    run_dir = tmp_path / "runs" / "20260101T000000Z-stack"
    run_dir.mkdir(parents=True)
    me = os.getpid()  # this process stands in for the stack's supervisor: alive, with its own start ticks
    (run_dir / "manifest.json").write_text(json.dumps({
        "name": "stack", "origin": "cli", "status": "ready", "run_dir": str(run_dir),
        "supervisor_pid": me, "supervisor_start_ticks": identity(me)[1], "components": {},
        "urls": {"web_1_admin": "http://127.0.0.1:9", "admin": "http://127.0.0.1:9"},
        "settings": {"PROCTOR_ADMIN_TOKEN": "t" * 32}}))
    assert digest_main([]) == 1  # it found the stack and scraped its node (nothing listens on port 9)
    assert "http://127.0.0.1:9" in capsys.readouterr().out


def test_metrics_are_read_with_the_admin_token_and_without_it_the_url_is_refused(monkeypatch, capsys) -> None:
    """/metrics asks for the admin token (stack/web/routes/health.py): --url takes it from the environment."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    token = "s" * 32

    class Node(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            allowed = self.headers.get("X-Admin-Token") == token
            self.send_response(200 if allowed else 403)
            self.end_headers()
            self.wfile.write(b'proctor_http_requests_total{node="web_1"} 7.0\n' if allowed else b"")

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Node)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        monkeypatch.delenv("PROCTOR_ADMIN_TOKEN", raising=False)
        with pytest.raises(SystemExit) as refused:
            digest_main(["--url", url])
        assert refused.value.code == 2 and "PROCTOR_ADMIN_TOKEN" in capsys.readouterr().err
        monkeypatch.setenv("PROCTOR_ADMIN_TOKEN", "wrong")
        assert digest_main(["--url", url]) == 1  # the node refused: shown unreachable (403)
        assert "403" in capsys.readouterr().out
        monkeypatch.setenv("PROCTOR_ADMIN_TOKEN", token)
        assert digest_main(["--url", url]) == 0
        assert f"{url}" in capsys.readouterr().out
    finally:
        server.shutdown()
        server.server_close()
