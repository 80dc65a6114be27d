"""The process entry: ``python -m chaos.faultproxy`` with --config/--seed, SIGTERM stop."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from chaos.faultproxy.proxy import ProxyError, split_host_port
from chaos.faultproxy.server import main, start_faultproxy_process, stop_faultproxy_process
from chaos.faultproxy.gojson import float32, float32_json

from .helpers import Upstream, connect, echo

pytestmark = pytest.mark.timeout(30)


def test_process_with_config_and_graceful_stop(tmp_path: Path, upstream: Upstream) -> None:
    config = tmp_path / "proxies.json"
    config.write_text(json.dumps([{"name": "cfg", "listen": "127.0.0.1:0",
                                   "upstream": upstream.addr}]))
    proc, url = start_faultproxy_process(0, seed=5, config=str(config),
                                         log_path=str(tmp_path / "fp.log"))
    try:
        with httpx.Client(base_url=url, timeout=5) as api:
            listen = api.get("/proxies").json()["cfg"]["listen"]
            with connect(int(listen.rsplit(":", 1)[1])) as c:
                echo(c)
    finally:
        code = stop_faultproxy_process(proc)
    assert code == 0  # SIGTERM is a graceful stop
    log = (tmp_path / "fp.log").read_text()
    assert '"seed": 5' in log and "Shutting down" in log


def test_main_rejects_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"upstream": "127.0.0.1:1"}]')
    assert main(["--port", "0", "--config", str(bad)]) == 1
    assert "missing required field: name at proxy 1" in capsys.readouterr().err


@pytest.mark.parametrize("addr, msg", [
    ("bad::addr::", "address bad::addr::: too many colons in address"),
    ("127.0.0.1", "address 127.0.0.1: missing port in address"),
    ("[::1", "address [::1: missing ']' in address"),
])
def test_split_host_port_errors(addr: str, msg: str) -> None:
    with pytest.raises(ProxyError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        split_host_port(addr)


def test_float32_json() -> None:
    assert float32_json(float32(1.0)) == 1 and isinstance(float32_json(1.0), int)
    assert float32_json(float32(0.1)) == 0.1
    assert float32_json(float32(0.5)) == 0.5
