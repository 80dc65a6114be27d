"""Benchmark the fault proxy and, when one is present, a real Toxiproxy, in the same run.

Run: ``.venv/bin/python loadtests/bench_faultproxy.py`` (about 15 s per server).
The fault proxy runs as its own process (``python -m chaos.faultproxy``), the echo server
as another, and this process is the client, so no two of them share a GIL.  A real
Toxiproxy is found as the stack finds it (``stack.embedded.links.choose_backend``):
``TOXIPROXY_URL`` is used as it is; a ``toxiproxy-server`` on PATH is started on
127.0.0.1 on a free port and stopped by pid.  With neither, its column says
"not measured" and ``<results>/bench/faultproxy.json`` (``stack.paths.bench_dir``) has
``"toxiproxy": null``: every figure printed was measured in this run.  All traffic is on 127.0.0.1.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaos.faultproxy.server import (start_faultproxy_process,  # noqa: E402
                                     stop_faultproxy_process)
from stack.embedded.links import choose_backend  # noqa: E402
from stack.paths import bench_dir  # noqa: E402

__all__ = ["main"]

RTT_SAMPLES = 5000
LATENCY_SAMPLES = 50
BULK_BYTES = 64 << 20
PROXY_NAME = "proctor_bench"  # unlikely to clash on a shared, external Toxiproxy


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
    with httpx.Client(base_url=api, timeout=10, trust_env=False) as client:
        r = client.post("/proxies", json={"name": PROXY_NAME, "listen": "127.0.0.1:0",
                                          "upstream": f"127.0.0.1:{echo_port}"})
        r.raise_for_status()
        proxy_port = int(r.json()["listen"].rsplit(":", 1)[1])
        res: dict[str, Any] = {}
        direct, via = rtts(echo_port, RTT_SAMPLES), rtts(proxy_port, RTT_SAMPLES)
        res["rtt_direct_p50_ms"], res["rtt_direct_p99_ms"] = pct(direct, .5), pct(direct, .99)
        res["rtt_proxy_p50_ms"], res["rtt_proxy_p99_ms"] = pct(via, .5), pct(via, .99)
        res["bulk_direct_mb_s"] = bulk(echo_port, BULK_BYTES)
        res["bulk_proxy_mb_s"] = bulk(proxy_port, BULK_BYTES)
        client.post(f"/proxies/{PROXY_NAME}/toxics", json={"type": "latency",
                                                   "attributes": {"latency": 100}}).raise_for_status()
        lat = rtts_nowarm(proxy_port, LATENCY_SAMPLES)
        err = [abs(v - 100.0) for v in lat]
        res["latency100_min_ms"], res["latency100_median_ms"] = min(lat), statistics.median(lat)
        res["latency100_p90_ms"], res["latency100_max_ms"] = pct(lat, .9), max(lat)
        res["latency_median_abs_error_ms"], res["latency_p90_abs_error_ms"] = (
            statistics.median(err), pct(err, .9))
        res["latency_max_abs_error_ms"] = max(err)
        client.delete(f"/proxies/{PROXY_NAME}")
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


ROWS = [  # (label, key)
    ("RTT direct p50 (ms)", "rtt_direct_p50_ms"), ("RTT direct p99 (ms)", "rtt_direct_p99_ms"),
    ("RTT via proxy p50 (ms)", "rtt_proxy_p50_ms"), ("RTT via proxy p99 (ms)", "rtt_proxy_p99_ms"),
    ("bulk echo direct (MB/s)", "bulk_direct_mb_s"),
    ("bulk echo via proxy (MB/s)", "bulk_proxy_mb_s"),
    ("latency 100 min (ms)", "latency100_min_ms"),
    ("latency 100 median (ms)", "latency100_median_ms"),
    ("latency 100 p90 (ms)", "latency100_p90_ms"), ("latency 100 max (ms)", "latency100_max_ms"),
    ("latency median |error| (ms)", "latency_median_abs_error_ms"),
    ("latency p90 |error| (ms)", "latency_p90_abs_error_ms"),
    ("latency max |error| (ms)", "latency_max_abs_error_ms"),
]


def report(ours: dict[str, Any], real: dict[str, Any] | None, noise: dict[str, float]) -> None:
    print(f"{'measurement':31} {'faultproxy':>11} {'real toxiproxy':>15}")
    for label, key in ROWS:
        theirs = f"{real[key]:15.3f}" if real is not None else f"{'not measured':>15}"
        print(f"{label:31} {ours[key]:11.3f} {theirs}")
    print(f"{'sleep(0.1) overshoot max (ms)':31} {noise['max']:11.3f} {'(platform)':>15}")


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "loadavg_1m_at_start": os.getloadavg()[0]}


@contextmanager
def echo_process(out_dir: Path) -> Iterator[int]:
    port_file = out_dir / ".echo_port"
    port_file.unlink(missing_ok=True)
    echo = subprocess.Popen([sys.executable, __file__, "--echo-server", str(port_file)])
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or echo.poll() is not None:
                raise RuntimeError("echo server did not start")
            time.sleep(0.02)
        yield int(port_file.read_text())
    finally:
        echo.terminate()
        echo.wait(5)
        port_file.unlink(missing_ok=True)


@contextmanager
def real_toxiproxy() -> Iterator[tuple[str, str] | None]:
    """(api url, how it was found) of a real Toxiproxy, or None when there is none."""
    backend, where = choose_backend()
    if backend == "external":
        yield where, f"TOXIPROXY_URL={where}"
        return
    if backend != "toxiproxy-server":
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([where, "-host", "127.0.0.1", "-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for_api(url, proc)
        yield url, f"{where} (pid {proc.pid})"
    finally:
        stop_faultproxy_process(proc)  # SIGTERM by pid, SIGKILL if it lingers


def _wait_for_api(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"toxiproxy-server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/version", timeout=1, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError("toxiproxy-server did not answer /version in time")


def main() -> int:
    out_dir = bench_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                              "machine": machine()}
    with echo_process(out_dir) as echo_port:
        proxy, api = start_faultproxy_process(0, seed=1)
        try:
            result["faultproxy"] = run(api, echo_port)
        finally:
            stop_faultproxy_process(proxy)
        with real_toxiproxy() as found:
            result["toxiproxy"] = run(found[0], echo_port) if found else None
            result["toxiproxy_source"] = found[1] if found else None
    result["platform_sleep100_overshoot_ms"] = sleep_noise(LATENCY_SAMPLES)
    (out_dir / "faultproxy.json").write_text(json.dumps(result, indent=2) + "\n")
    report(result["faultproxy"], result["toxiproxy"], result["platform_sleep100_overshoot_ms"])
    print("real toxiproxy:", result["toxiproxy_source"] or
          "not measured (no TOXIPROXY_URL, no toxiproxy-server on PATH)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--echo-server":
        echo_server(sys.argv[2])
    else:
        sys.exit(main())
