"""A per-run certificate authority and a server certificate for 127.0.0.1/localhost.

Made with the openssl CLI (no Python crypto dependency). Paths are absolute because
valkey resolves relative TLS paths after it chdirs into its ``dir``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from stack.embedded import StackError

__all__ = ["CertPaths", "make_certs", "OPENSSL_HINT"]

OPENSSL_HINT = "apt-get install openssl"
_DAYS = "7"
_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]  # fast to generate

_SERVER_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


@dataclass(frozen=True)
class CertPaths:
    ca_cert: Path
    server_cert: Path
    server_key: Path


def _openssl(args: list[str], cwd: Path) -> None:
    binary = shutil.which("openssl")
    if not binary:
        raise StackError(f"openssl not found: {OPENSSL_HINT}")
    done = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StackError(f"openssl {args[0]} failed ({done.returncode}): {done.stderr.strip()}")


def make_certs(directory: Path) -> CertPaths:
    """Write ca.crt, server.crt and server.key into ``directory`` and return absolute paths."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        ["req", "-x509", *_CURVE, "-nodes", "-days", _DAYS, "-subj", "/CN=Proctor run CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
         "-keyout", "ca.key", "-out", "ca.crt"],
        directory,
    )
    _openssl(["req", "-new", *_CURVE, "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr"],
             directory)
    (directory / "server.ext").write_text(_SERVER_EXTENSIONS)
    _openssl(
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", _DAYS, "-extfile", "server.ext", "-out", "server.crt"],
        directory,
    )
    for key in ("ca.key", "server.key"):
        (directory / key).chmod(0o600)
    return CertPaths(directory / "ca.crt", directory / "server.crt", directory / "server.key")
