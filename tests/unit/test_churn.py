"""The churn generator and the connection counters, against tiny local servers (no Valkey)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

from chaos.load.churn import ChurnSpec, run_churn
from chaos.observe.valkey_stats import component_of, read_process_counters
from stack.config import Settings
from stack.connection_stats import ConnectionStats
from stack.valkey_client import classify_error, client_name


async def _serve(reply: bytes | None):
    """A TCP server answering every connection with ``reply`` (None: never answers)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read(1024)
            if reply is None:
                await asyncio.sleep(5)
            else:
                writer.write(reply)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _churn(reply: bytes | None, spec: ChurnSpec, stop_after: float | None = None) -> dict:
    async def main() -> dict:
        server, port = await _serve(reply)
        stop = asyncio.Event()
        if stop_after is not None:
            asyncio.get_running_loop().call_later(stop_after, stop.set)
        async with server:
            return await run_churn("127.0.0.1", port, None, spec, None, stop)
    return asyncio.run(main())


# Every op may be in flight at once and the timeouts only bound a hang: the server answers at once, so on a
# loaded CI machine a slow op must still count as answered, never as skipped or timed out.
FAST = ChurnSpec(rate=50.0, duration=0.2, max_ops=10, concurrency=10, connect_timeout=10.0, socket_timeout=10.0)


def test_every_op_gets_one_outcome_ok() -> None:
    result = _churn(b"+OK\r\n+PONG\r\n", FAST)
    assert result["outcomes"]["ok"] == result["ops"] == 10
    assert result["handshakes"] == 10 and result["latency"]["count"] == 10


def test_max_clients_reply_is_counted_as_max_clients() -> None:
    result = _churn(b"-ERR max number of clients reached\r\n", FAST)
    assert result["outcomes"]["max_clients"] == 10 and result["outcomes"]["ok"] == 0


def test_silence_is_a_timeout_and_concurrency_bounds_in_flight() -> None:
    spec = ChurnSpec(rate=100.0, duration=0.1, max_ops=10, concurrency=2, connect_timeout=0.5, socket_timeout=0.3)
    result = _churn(None, spec)
    assert result["outcomes"]["timeout"] >= 1
    assert result["outcomes"]["skipped"] >= 1  # only 2 may wait at once
    assert result["outcomes"]["timeout"] + result["outcomes"]["skipped"] == 10


def test_refused_and_stop_ends_early() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens

    async def main() -> dict:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.15, stop.set)
        return await run_churn("127.0.0.1", port, None, ChurnSpec(rate=20.0, duration=30.0, max_ops=1000), None, stop)

    result = asyncio.run(main())
    # Ops and the stop share the event loop's clock: 0.15 s at 20/s is a handful, where the
    # 30 s duration would be hundreds. Ending early is shown by the count, not a stopwatch.
    assert 1 <= result["ops"] <= 5 and result["outcomes"]["refused"] == result["ops"]


def test_classify_error_kinds() -> None:
    from redis.exceptions import ConnectionError, TimeoutError

    assert classify_error(ConnectionError("max number of clients reached")) == "max_clients"
    assert classify_error(TimeoutError("Timeout connecting to server"), connecting=True) == "connect_timeout"
    assert classify_error(TimeoutError("Timeout reading from 127.0.0.1:6380")) == "timeout"
    assert classify_error(ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")) == "refused"
    assert classify_error(ConnectionError("Connection closed by server.")) == "reset"
    assert classify_error(ConnectionError("Error 8 connecting to x. [SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol")) == "tls"


def test_client_names_and_counter_files(tmp_path: Path) -> None:
    assert client_name(Settings(component="worker_sms_1"), "queue") == "worker_sms_1/queue"
    assert client_name(Settings(node_name="web_3"), "probe") == "web_3/probe"  # outside the runner
    assert component_of("worker_sms_1/queue") == component_of("worker_sms_1.4242") == "worker_sms_1"
    assert component_of("") == "(unnamed)"
    path = tmp_path / "connections" / "worker_sms_1.4000.jsonl"
    stats = ConnectionStats("worker_sms_1", path, min_interval=0.0)
    stats.record_connect()
    stats.record_connect()
    stats.record_error("reset", connecting=False)
    data = json.loads(path.read_text().splitlines()[-1])
    assert (data["connects"], data["errors"], data["error_total"]) == (2, {"reset": 1}, 1)
    with path.open("a") as out:  # a horse's line, then a line still being appended
        out.write(json.dumps({**data, "pid": 999, "connects": 5}) + "\n" + '{"component": "worker_sms_1", "pi')
    summed = read_process_counters(tmp_path)["worker_sms_1"]
    assert (summed["connects"], summed["pids"], summed["max_process_connects"], summed["error_total"]) == (7, 2, 5, 2)


def test_churn_authenticates_as_an_acl_user_when_it_has_one() -> None:
    from chaos.load.churn import ChurnSpec, _commands

    payload, replies = _commands(ChurnSpec(op="ping"), 0, "pw", "harness")
    assert payload.startswith(b"*3\r\n$4\r\nAUTH\r\n$7\r\nharness\r\n$2\r\npw\r\n") and replies == 3
    bare, bare_replies = _commands(ChurnSpec(op="ping"), 0)
    assert not bare.startswith(b"*3\r\n$4\r\nAUTH") and bare_replies == 2  # the control: no credential, no AUTH
