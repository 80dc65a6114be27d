"""Benchmark the fault proxy against direct loopback, beside real Toxiproxy 2.12.0 figures.

Run: ``.venv/bin/python loadtests/bench_faultproxy.py`` (bounded to well under 60 s).
The proxy runs as its own process (``python -m chaos.faultproxy``), the echo server as
another, and this process is the client, so no two of them share a GIL.  All traffic is
on 127.0.0.1.  Results go to ``results/bench/faultproxy.json``.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaos.faultproxy.server import start_faultproxy_process, stop_faultproxy_process  # noqa: E402

__all__ = ["main"]

RTT_SAMPLES = 5000
LATENCY_SAMPLES = 50
BULK_BYTES = 64 << 20
REFERENCE = {  # real toxiproxy-server 2.12.0, loopback, 2 vCPU (spec section 5)
    "rtt_direct_p50_ms": "0.032-0.040", "rtt_direct_p99_ms": "0.18-0.23",
    "rtt_proxy_p50_ms": "0.10-0.20", "rtt_proxy_p99_ms": "0.47-0.66",
    "latency100_ms": "100.6 / 100.7 / 101.2-101.4",
    "bulk_direct_mb_s": "562-608", "bulk_proxy_mb_s": "152-155",
}
TARGETS = {"rtt_proxy_p50_ms": 0.40, "rtt_proxy_p99_ms": 1.32, "bulk_proxy_mb_s": 75.0,
           "latency_abs_error_ms": 2.0}


def echo_server(port_file: str) -> None:
    """Blocking echo server, one thread per connection (run in a child process)."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    Path(port_file).write_text(str(lsock.getsockname()[1]))

    def serve(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        with conn:
            while True:
                try:
                    n = conn.recv_into(buf)
                    if not n:
                        return
                    conn.sendall(view[:n])
                except OSError:
                    return

    while True:
        conn, _ = lsock.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _recv_exact(sock: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError("closed")
        got += len(chunk)


def rtts(port: int, samples: int) -> list[float]:
    """16-byte echo round trips in ms, on one connection (after a warm-up)."""
    payload = b"x" * 16
    out = []
    with _connect(port) as sock:
        for i in range(samples + 100):
            t0 = time.perf_counter()
            sock.sendall(payload)
            _recv_exact(sock, 16)
            if i >= 100:
                out.append((time.perf_counter() - t0) * 1000.0)
    return out


def bulk(port: int, total: int) -> float:
    """Echo ``total`` bytes (sender thread + receiving main thread); MB/s (10^6 B)."""
    block = b"\0" * (1 << 20)
    with _connect(port) as sock:
        def send() -> None:
            for _ in range(total // len(block)):
                sock.sendall(block)

        buf = bytearray(1 << 20)
        t0 = time.perf_counter()
        sender = threading.Thread(target=send)
        sender.start()
        got = 0
        while got < total:
            n = sock.recv_into(buf)
            if not n:
                break
            got += n
        elapsed = time.perf_counter() - t0
        sender.join()
    return got / elapsed / 1e6


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(api: str, echo_port: int) -> dict[str, Any]:
    with httpx.Client(base_url=api, timeout=10) as client:
        r = client.post("/proxies", json={"name": "bench", "listen": "127.0.0.1:0",
                                          "upstream": f"127.0.0.1:{echo_port}"})
        r.raise_for_status()
        proxy_port = int(r.json()["listen"].rsplit(":", 1)[1])
        res: dict[str, Any] = {}
        direct, via = rtts(echo_port, RTT_SAMPLES), rtts(proxy_port, RTT_SAMPLES)
        res["rtt_direct_p50_ms"], res["rtt_direct_p99_ms"] = pct(direct, .5), pct(direct, .99)
        res["rtt_proxy_p50_ms"], res["rtt_proxy_p99_ms"] = pct(via, .5), pct(via, .99)
        res["bulk_direct_mb_s"] = bulk(echo_port, BULK_BYTES)
        res["bulk_proxy_mb_s"] = bulk(proxy_port, BULK_BYTES)
        client.post("/proxies/bench/toxics", json={"type": "latency",
                                                   "attributes": {"latency": 100}}).raise_for_status()
        lat = rtts_nowarm(proxy_port, LATENCY_SAMPLES)
        err = [abs(v - 100.0) for v in lat]
        res["latency100_min_ms"], res["latency100_median_ms"] = min(lat), statistics.median(lat)
        res["latency100_p90_ms"], res["latency100_max_ms"] = pct(lat, .9), max(lat)
        res["latency_median_abs_error_ms"], res["latency_p90_abs_error_ms"] = (
            statistics.median(err), pct(err, .9))
        res["latency_max_abs_error_ms"] = max(err)
        res["platform_sleep100_overshoot_ms"] = sleep_noise(LATENCY_SAMPLES)
        client.delete("/proxies/bench")
    return res


def sleep_noise(samples: int) -> dict[str, float]:
    """How late a plain ``time.sleep(0.1)`` wakes here: the platform's own timer noise."""
    late = []
    for _ in range(samples):
        t0 = time.perf_counter()
        time.sleep(0.1)
        late.append((time.perf_counter() - t0) * 1000.0 - 100.0)
    return {"median": statistics.median(late), "p90": pct(late, .9), "max": max(late)}


def rtts_nowarm(port: int, samples: int) -> list[float]:
    payload, out = b"y" * 16, []
    with _connect(port) as sock:
        for _ in range(samples):
            t0 = time.perf_counter()
            sock.sendall(payload)
            _recv_exact(sock, 16)
            out.append((time.perf_counter() - t0) * 1000.0)
    return out


def report(res: dict[str, Any]) -> None:
    rows = [
        ("RTT direct p50 (ms)", res["rtt_direct_p50_ms"], REFERENCE["rtt_direct_p50_ms"], ""),
        ("RTT direct p99 (ms)", res["rtt_direct_p99_ms"], REFERENCE["rtt_direct_p99_ms"], ""),
        ("RTT via proxy p50 (ms)", res["rtt_proxy_p50_ms"], REFERENCE["rtt_proxy_p50_ms"], "<= 0.40"),
        ("RTT via proxy p99 (ms)", res["rtt_proxy_p99_ms"], REFERENCE["rtt_proxy_p99_ms"], "<= 1.32"),
        ("bulk echo direct (MB/s)", res["bulk_direct_mb_s"], REFERENCE["bulk_direct_mb_s"], ""),
        ("bulk echo via proxy (MB/s)", res["bulk_proxy_mb_s"], REFERENCE["bulk_proxy_mb_s"], ">= 75"),
        ("latency 100 min (ms)", res["latency100_min_ms"], "100.6", ""),
        ("latency 100 median (ms)", res["latency100_median_ms"], "100.7", ""),
        ("latency 100 p90 (ms)", res["latency100_p90_ms"], "-", ""),
        ("latency 100 max (ms)", res["latency100_max_ms"], "101.2-101.4", ""),
        ("latency median |error| (ms)", res["latency_median_abs_error_ms"], "0.7", "<= 2"),
        ("latency p90 |error| (ms)", res["latency_p90_abs_error_ms"], "-", "<= 2"),
        ("latency max |error| (ms)", res["latency_max_abs_error_ms"], "<= 1.4", "<= 2"),
        ("sleep(0.1) overshoot max (ms)", res["platform_sleep100_overshoot_ms"]["max"], "-", ""),
    ]
    print(f"{'measurement':31} {'faultproxy':>11} {'toxiproxy 2.12':>16} {'target':>9}")
    for name, value, ref, target in rows:
        print(f"{name:31} {value:11.3f} {ref:>16} {target:>9}")
    print("targets met:", json.dumps(res["targets_met"]))


def main() -> int:
    out_dir = ROOT / "results" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    port_file = out_dir / ".echo_port"
    port_file.unlink(missing_ok=True)
    echo = subprocess.Popen([sys.executable, __file__, "--echo-server", str(port_file)])
    proxy = None
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or echo.poll() is not None:
                raise RuntimeError("echo server did not start")
            time.sleep(0.02)
        echo_port = int(port_file.read_text())
        proxy, api = start_faultproxy_process(0, seed=1)
        t0 = time.monotonic()
        res = run(api, echo_port)
        res["elapsed_s"] = time.monotonic() - t0
    finally:
        if proxy is not None:
            stop_faultproxy_process(proxy)
        echo.terminate()
        echo.wait(5)
        port_file.unlink(missing_ok=True)
    res["targets_met"] = {
        "rtt_proxy_p50": res["rtt_proxy_p50_ms"] <= TARGETS["rtt_proxy_p50_ms"],
        "rtt_proxy_p99": res["rtt_proxy_p99_ms"] <= TARGETS["rtt_proxy_p99_ms"],
        "bulk_proxy": res["bulk_proxy_mb_s"] >= TARGETS["bulk_proxy_mb_s"],
        "latency_median": res["latency_median_abs_error_ms"] <= TARGETS["latency_abs_error_ms"],
        "latency_p90": res["latency_p90_abs_error_ms"] <= TARGETS["latency_abs_error_ms"],
        "latency_max": res["latency_max_abs_error_ms"] <= TARGETS["latency_abs_error_ms"],
    }
    res["reference_toxiproxy_2_12_0"] = REFERENCE
    res["targets"] = TARGETS
    (out_dir / "faultproxy.json").write_text(json.dumps(res, indent=2) + "\n")
    report(res)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--echo-server":
        echo_server(sys.argv[2])
    else:
        sys.exit(main())
