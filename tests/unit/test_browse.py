"""report.html and `proctor serve` (issue #27 item 8): a self-contained page per run; a server on
127.0.0.1 that lists runs and sweeps and serves only reports and plots."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from chaos.analyze import analyze
from chaos.browse.serve import build_server
from test_analyze import REPRODUCE, build_run

SECRETS = ("manifest.json", "roster.json", "history.jsonl", "ledgers/answers.json", "logs/web_1.log",
           "scenario.json", "report.json")


def make_results(root: Path) -> Path:
    """A results folder with one checked run, its secrets beside it, a `latest` link and a sweep."""
    run = root / "runs" / "20270115T080000Z-kill-merit-worker-seed7"
    run.mkdir(parents=True)
    build_run(run)
    analyze(run)
    (run / "manifest.json").write_text(json.dumps({"settings": {"PROCTOR_ADMIN_TOKEN": "s3cret"}}))
    (run / "roster.json").write_text(json.dumps({"exams": {"NOVA-101": {"s1": "code"}}}))
    (run / "logs").mkdir()
    (run / "logs" / "web_1.log").write_text("log")
    (root / "runs" / "latest").symlink_to(run.name)
    sweep = root / "sweep" / "20270115T090000Z"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "table.md").write_text("# Sweep\n")
    (sweep / "table.json").write_text(json.dumps({"exit_code": 0, "runs": [{"ok": True}]}))
    return run


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once: analyze() with its plots is the slow part."""
    root = tmp_path_factory.mktemp("browse") / "results"
    make_results(root)
    return root


@pytest.fixture(scope="module")
def served(results: Path) -> Iterator[tuple[str, Path]]:
    run = next(p for p in (results / "runs").iterdir() if not p.is_symlink())
    server = build_server(results, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", run
    finally:
        server.shutdown()
        server.server_close()


def test_report_html_is_self_contained_with_every_part(served: tuple[str, Path]) -> None:
    _, run = served
    page = (run / "report.html").read_text()
    report = json.loads((run / "report.json").read_text())
    assert 'id="verdict"' in page and ">VALID<" in page and "10 valid, 8 n/a, 0 invalid, 0 unknown" in page
    assert all(f'id="checker-{name}"' in page for name in report["checkers"])
    assert REPRODUCE.split()[0] in page and "Faults" in page
    assert page.count('src="data:image/png;base64,') == len(report["plots"]) >= 4
    # No network: nothing is fetched from anywhere (no src/href to another origin, no script).
    assert not re.search(r'(src|href)="(https?:)?//', page) and "<script" not in page


def test_an_example_is_escaped(tmp_path: Path) -> None:
    from chaos.browse.page import render_html

    page = render_html({"verdict": "INVALID", "checkers": {"answers": {
        "valid": False, "counts": {"lost": 1}, "violations": ["lost"],
        "examples": {"lost": [{"answer": "<img src=x onerror=alert(1)>"}]}}}}, tmp_path)
    assert "<img src=x" not in page and "&lt;img src=x" in page


def test_serve_lists_runs_and_sweeps_and_links_work(served: tuple[str, Path]) -> None:
    url, run = served
    index = httpx.get(url + "/", trust_env=False)
    assert index.status_code == 200 and run.name in index.text and "kill-merit-worker" in index.text
    assert "2027-01-15T" in index.text and ">VALID<" in index.text and "latest" not in index.text
    links = re.findall(r'href="(/[^"]+)"', index.text)
    assert f"/runs/{run.name}/report.html" in links and "/sweep/20270115T090000Z/" in links
    for link in links:
        assert httpx.get(url + link, trust_env=False).status_code == 200, link
    plot = httpx.get(f"{url}/runs/{run.name}/throughput.png", trust_env=False)
    assert plot.status_code == 200 and plot.headers["content-type"] == "image/png"


@pytest.mark.parametrize("secret", SECRETS)
def test_serve_never_sends_secrets_answers_or_logs(served: tuple[str, Path], secret: str) -> None:
    url, run = served
    assert (run / secret).exists()
    answer = httpx.get(f"{url}/runs/{run.name}/{secret}", trust_env=False)
    assert answer.status_code == 404 and "s3cret" not in answer.text


@pytest.mark.parametrize("path", ["/runs/latest/report.html", "/runs/../../etc/passwd.png",
                                  "/runs/%2e%2e/%2e%2e/x.png", "/runs/..%2f..%2fx/report.html"])
def test_serve_refuses_dot_dot_and_symlinks(served: tuple[str, Path], path: str) -> None:
    url, _ = served
    with httpx.Client(trust_env=False) as client:
        request = client.build_request("GET", url + path)
        request.url = httpx.URL(url + path)  # as typed: no client-side normalisation of ..
        assert client.send(request).status_code == 404


def test_serve_is_read_only_and_on_loopback(served: tuple[str, Path]) -> None:
    url, run = served
    assert url.startswith("http://127.0.0.1:")
    assert httpx.post(f"{url}/runs/{run.name}/report.html", trust_env=False).status_code == 405
    assert httpx.delete(f"{url}/runs/{run.name}/report.html", trust_env=False).status_code == 405
    assert (run / "report.html").exists()


def test_a_symlinked_plot_pointing_outside_is_refused(served: tuple[str, Path], tmp_path: Path) -> None:
    url, run = served
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"not yours")
    (run / "evil.png").symlink_to(outside)
    assert httpx.get(f"{url}/runs/{run.name}/evil.png", trust_env=False).status_code == 404
    assert os.path.exists(outside)
