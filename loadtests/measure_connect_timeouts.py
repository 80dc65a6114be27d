"""Which toxic makes a TLS handshake to Valkey slow enough to time out, and what it does to pooled clients.

    .venv/bin/python loadtests/measure_connect_timeouts.py [--ops 40] [--connect-timeout 0.25]

Starts one TLS-only ``valkey-server`` and an in-process fault proxy in front of it (127.0.0.1
only), then for each toxic on the proxy's upstream (added before the clients' first byte) runs
``--ops`` SETs from 4 threads through a pooled client and through a fresh-connection client
(``stack.valkey_client`` with the ``POOLED`` and ``FRESH`` policies, connect timeout
``--connect-timeout``), and prints what each counted: connection timeouts by phase, connects,
failed calls and the mean call time. Stops what it started by pid. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from redis.exceptions import RedisError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaos.faultproxy.server import ThreadedFaultProxy
from stack.config import Settings
from stack.connection_stats import ConnectionStats, install_process_stats
from stack.embedded.certs import make_certs
from stack.embedded.valkey import tls_ping
from stack.valkey_client import FRESH, POOLED, ConnectionPolicy, valkey_client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_valkey(folder: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    certs = make_certs(folder / "certs")
    port = _free_port()
    config = folder / "valkey.conf"
    config.write_text("\n".join([
        "bind 127.0.0.1", "port 0", f"tls-port {port}", f'tls-cert-file "{certs.server_cert}"',
        f'tls-key-file "{certs.server_key}"', f'tls-ca-cert-file "{certs.ca_cert}"', "tls-auth-clients no",
        'save ""', "appendonly no", f'dir "{folder}"', 'logfile ""']) + "\n")
    binary = shutil.which("valkey-server") or "valkey-server"
    proc = subprocess.Popen([binary, str(config)], stdout=subprocess.DEVNULL, start_new_session=True)
    for _ in range(100):
        if tls_ping(f"rediss://127.0.0.1:{port}/0", certs.ca_cert):
            return proc, port, certs.ca_cert
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("valkey-server did not answer over TLS within 10 s")


def _run(settings: Settings, policy: ConnectionPolicy, ops: int) -> dict[str, object]:
    stats = install_process_stats(ConnectionStats(policy.name))
    client = valkey_client(settings, "queue", policy)
    failed = 0
    started = time.perf_counter()

    def one(i: int) -> bool:
        try:
            client.set(f"measure:{policy.name}:{i}", "x")
            return True
        except RedisError:
            return False

    with ThreadPoolExecutor(4) as pool:
        failed = sum(not ok for ok in pool.map(one, range(ops)))
    elapsed = time.perf_counter() - started
    client.close()
    snap = stats.snapshot()
    return {"policy": policy.name, "ops": ops, "failed": failed, "connects": snap["connects"],
            "timeouts": snap["timeouts"], "errors": snap["errors"], "seconds_per_call": round(4 * elapsed / ops, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=40)
    parser.add_argument("--connect-timeout", type=float, default=0.25)
    args = parser.parse_args()
    t_ms = int(args.connect_timeout * 1000)
    toxics = {
        "none": None,
        f"latency {int(t_ms * 1.5)} ms": {"type": "latency", "attributes": {"latency": int(t_ms * 1.5)}},
        f"latency {int(t_ms * 0.8)} ms": {"type": "latency", "attributes": {"latency": int(t_ms * 0.8)}},
        f"slow_open {int(t_ms * 0.8)}±{int(t_ms * 0.4)} ms": {
            "type": "slow_open", "attributes": {"delay": int(t_ms * 0.8), "jitter": int(t_ms * 0.4)}},
    }
    with tempfile.TemporaryDirectory(prefix="measure-timeouts-") as tmp:
        valkey, port, ca = _start_valkey(Path(tmp))
        proxy = ThreadedFaultProxy("127.0.0.1", 0, seed=1).start()
        try:
            api = httpx.Client(base_url=proxy.url, timeout=10)
            listen = api.post("/proxies", json={"name": "valkey", "listen": "127.0.0.1:0",
                                                "upstream": f"127.0.0.1:{port}"}).json()["listen"]
            settings = Settings(valkey_url=f"rediss://{listen}/0", valkey_ca=str(ca),
                                valkey_connect_timeout=args.connect_timeout, component="measure")
            print(f"connect timeout {args.connect_timeout} s, {args.ops} SETs per client from 4 threads, queue retries 3")
            print("| toxic (upstream) | client | calls failed | connects | timeouts by phase | errors | s per call |")
            print("|---|---|---|---|---|---|---|")
            for label, toxic in toxics.items():
                if toxic:
                    api.post("/proxies/valkey/toxics", json={**toxic, "name": "slow", "stream": "upstream"})
                for policy in (POOLED, FRESH):
                    r = _run(settings, policy, args.ops)
                    print(f"| {label} | {r['policy']} | {r['failed']} of {r['ops']} | {r['connects']} | "
                          f"{r['timeouts'] or '-'} | {r['errors'] or '-'} | {r['seconds_per_call']} |")
                if toxic:
                    api.delete("/proxies/valkey/toxics/slow")
        finally:
            proxy.stop()
            valkey.terminate()
            valkey.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
