"""Log shipping parts (issue #26, docs/log-shipping.md): the fake log store over real RELP and
HTTP, the shipper's counters from impstats records, and the rsyslog configuration (checked by
rsyslogd itself), plus one real rsyslog run that redacts and ships."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from stack.deploy.ports import free_port, port_is_free
from stack.logship import rsyslog
from stack.logship.stats import shipper_counts
from stack.logship import store as store_module
from stack.logship.store import RelpError, parse_frame_header

REPO = Path(__file__).resolve().parents[2]
TOKEN = "log-token"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[int, str, Path]]:
    relp, http = free_port(), free_port()
    ledger = tmp_path / "store" / "logs.db"
    env = {**os.environ, "PROCTOR_LOG_STORE_TOKEN": TOKEN}
    child = subprocess.Popen([sys.executable, "-m", "stack.logship.store", "--relp-port", str(relp), "--http-port", str(http),
                              "--ledger", str(ledger)], env=env, cwd=REPO, start_new_session=True)
    url = f"http://127.0.0.1:{http}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/stats", timeout=1, trust_env=False)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    try:
        yield relp, url, ledger
    finally:
        child.kill()  # by pid: the one process this fixture started
        child.wait(timeout=5)


def relp_exchange(port: int, frames: list[bytes]) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        for frame in frames:
            conn.sendall(frame)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def frame(txnr: int, command: str, data: bytes = b"") -> bytes:
    return f"{txnr} {command} {len(data)}".encode() + (b" " + data if data else b"") + b"\n"


def test_store_acks_each_message_after_recording_it_and_guards_its_read_api(store: tuple[int, str, Path]) -> None:
    relp, url, ledger = store
    message = json.dumps({"file": "/l/web_1.log", "offset": "0", "t": "2026-12-02T00:00:00+00:00", "msg": "hello"}).encode()
    answer = relp_exchange(relp, [frame(1, "open", b"relp_version=0\ncommands=syslog"), frame(2, "syslog", message),
                                  frame(3, "close")])
    assert answer.startswith(b"1 rsp ") and b"200 OK" in answer.split(b"\n")[0]
    assert b"2 rsp 6 200 OK\n" in answer and answer.endswith(b"3 rsp 0 \n")
    assert httpx.get(f"{url}/lines", trust_env=False).status_code == 401
    assert httpx.get(f"{url}/lines", headers={"X-Log-Token": "wrong"}, trust_env=False).status_code == 401
    [row] = httpx.get(f"{url}/lines", headers={"X-Log-Token": TOKEN}, trust_env=False).json()["lines"]
    assert (row["file"], row["offset"], row["msg"]) == ("/l/web_1.log", "0", "hello")
    assert ledger.stat().st_mode & 0o777 == 0o600 and ledger.parent.stat().st_mode & 0o777 == 0o700


def test_store_drops_a_connection_that_does_not_speak_relp(store: tuple[int, str, Path]) -> None:
    relp, url, _ = store
    assert relp_exchange(relp, [b"GET / HTTP/1.1\r\n\r\n"]) == b""
    assert httpx.get(f"{url}/stats", headers={"X-Log-Token": TOKEN}, trust_env=False).json() == {"lines": 0}


def test_relp_listens_before_the_read_api_that_readiness_probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever sees /stats answer may ship at once: the RELP port must already be listening then."""
    relp, http = free_port(), free_port()
    seen: dict[str, bool] = {}

    class Stop(Exception):
        """Ends the store where the read API would bind: the order is all this test asks about."""

    class Probe(store_module.ThreadingHTTPServer):
        def __init__(self, *args: object, **kwargs: object) -> None:
            seen["relp_listening"] = not port_is_free(relp)  # a bind, not a connection the store would accept
            raise Stop

    monkeypatch.setattr(store_module, "ThreadingHTTPServer", Probe)
    monkeypatch.setenv("PROCTOR_LOG_STORE_TOKEN", TOKEN)
    with pytest.raises(Stop):
        store_module.main(["--relp-port", str(relp), "--http-port", str(http), "--ledger", str(tmp_path / "logs.db")])
    assert seen == {"relp_listening": True}


def test_store_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PROCTOR_LOG_STORE_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "stack.logship.store", "--relp-port", "1", "--http-port", "1",
                           "--ledger", str(tmp_path / "x.db")], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "PROCTOR_LOG_STORE_TOKEN" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("header", [b"x syslog 3", b"1 syslog", b"1 syslog 99999999"])
def test_bad_relp_headers_are_refused(header: bytes) -> None:
    with pytest.raises(RelpError):
        parse_frame_header(header)


def test_counters_add_the_disk_parts_discards_and_are_empty_without_records() -> None:
    records = [
        {"name": "to_store queue", "size": 5, "enqueued": 100, "discarded.full": 4, "discarded.nf": 1},
        {"name": "to_store queue[DA]", "size": 3, "enqueued": 40, "discarded.full": 20, "discarded.nf": 0},
        {"name": "to_store", "resumed": 2},
    ]
    assert shipper_counts(records) == {"queued": 8, "shipped": 67, "dropped": 25, "enqueued": 100, "resumed": 2}
    assert shipper_counts([]) == {}


@pytest.mark.integration  # needs rsyslogd (scripts/setup.sh installs it; --python-only does not)
def test_the_configurations_parse_and_differ_only_in_their_policy(tmp_path: Path) -> None:
    paths = rsyslog.ShipperPaths.under(tmp_path)
    (tmp_path / "logs").mkdir()
    for redaction, buffer in ((rsyslog.REDACT, rsyslog.BOUNDED), (rsyslog.NO_REDACTION, rsyslog.uncounted(rsyslog.BOUNDED))):
        rsyslog.write_config(paths, 12345, redaction, buffer)
        rsyslog.check_config(paths)  # rsyslogd -N1: every module loads, the syntax holds
    text = paths.config.read_text()
    assert "re_match" not in text and "impstats" not in text.replace("# no impstats", "")
    rsyslog.write_config(paths, 12345)
    text = paths.config.read_text()
    assert text.count("re_match") == len(rsyslog.REDACTION_RULES) and 'module(load="impstats"' in text
    assert f'queue.maxDiskSpace="{rsyslog.BOUNDED.disk_bytes}"' in text and 'queue.timeoutEnqueue="0"' in text


@pytest.mark.integration
def test_real_rsyslog_redacts_before_shipping_and_ships_the_rest(tmp_path: Path, store: tuple[int, str, Path]) -> None:
    relp, url, _ = store
    paths = rsyslog.ShipperPaths.under(tmp_path)
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "web_1.log"
    log.write_text('plain line one\nanswer {"content": "CANARY-A"}\nlogin access_code=CANARY-C\n'
                   "Authorization: Bearer abcdefghijklmnop\nplain line two\n")
    rsyslog.write_config(paths, relp)
    shipper = subprocess.Popen(rsyslog.rsyslogd_argv(paths), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline, lines = time.monotonic() + 30, []
        while time.monotonic() < deadline and len(lines) < 5:
            lines = httpx.get(f"{url}/lines", headers={"X-Log-Token": TOKEN}, trust_env=False).json()["lines"]
            time.sleep(0.1)
    finally:
        rsyslog.stop(shipper)
    msgs = [line["msg"] for line in lines]
    assert msgs == ["plain line one", "[redacted by the shipper: answer]", "[redacted by the shipper: access_code]",
                    "[redacted by the shipper: bearer_token]", "plain line two"], msgs
    assert [line["offset"] for line in lines][:2] == ["0", "15"]  # each line's start offset, as produced_lines reads it
