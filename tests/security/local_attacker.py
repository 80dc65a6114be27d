"""The attacker of issue #21: a local process running as another user (``nobody``).

``run_as_nobody(code, *args)`` runs ``code`` in a fresh interpreter that imports its
tools (redis, rq, httpx, ssl) and then drops to uid/gid 65534 before the attack starts:
from there it holds nothing of ours. Its environment is empty of the stack's secrets; the
run folder (0700, root) is closed to it, which it checks itself first. It prints one JSON
line (``emit``) that the test reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

NOBODY = 65534

_PRELUDE = f"""
import base64, datetime, hashlib, json, os, random, secrets, selectors, socket, ssl, sys, uuid, zlib
import httpx, redis, redis.backoff, redis.retry, rq, rq.job, rq.queue, rq.serializers
from redis.exceptions import RedisError
# Warm every lazy import while the interpreter (in root's home) is still readable.
_warm = redis.Redis(host="127.0.0.1", port=1, ssl=True, ssl_cert_reqs="none", retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
for _serializer in (None, rq.serializers.JSONSerializer):
    rq.Queue("warm", connection=_warm, serializer=_serializer).create_job("os.getpid").to_dict()
import encodings.idna, encodings.ascii, encodings.latin_1  # noqa: E401
for _call in (_warm.ping, lambda: httpx.get("http://127.0.0.1:1/", timeout=1)):
    try:
        _call()  # a refused connection walks the code paths (getaddrinfo, codecs) once
    except Exception:
        pass
ssl.create_default_context()
os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
assert os.getuid() == {NOBODY} and os.geteuid() == {NOBODY}
def emit(**fields):
    print(json.dumps(fields)); sys.stdout.flush()
def valkey(port, **credential):  # the issue's client: TLS without verification (the CA is in the run folder)
    return redis.Redis(host="127.0.0.1", port=int(port), ssl=True, ssl_cert_reqs="none", socket_timeout=5,
                       socket_connect_timeout=5, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0), **credential)
"""


def run_as_nobody(code: str, *args: str, run_dir: str = "", timeout: float = 120) -> dict[str, Any]:
    """Run ``code`` (with ``sys.argv[1:] == args``) as nobody; its last JSON line."""
    check = f"\ntry:\n    os.listdir({run_dir!r})\n    emit(error='the run folder is readable')\n    sys.exit(3)\n" \
            f"except PermissionError:\n    pass\n" if run_dir else ""
    done = subprocess.run([sys.executable, "-c", _PRELUDE + check + code, *args], cwd="/",
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"attacker exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1])
