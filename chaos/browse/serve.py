"""``proctor serve [RESULTS]``: the runs and sweeps of a results folder, in a browser.

It binds to 127.0.0.1 only and answers GET and HEAD only. The index lists every run (verdict,
scenario, seed, time) and every sweep with links to their reports. It serves nothing but
reports and plots (:data:`SERVED`): a run folder also holds ``manifest.json`` (the admin
token), ``roster.json`` (students' login codes), ledgers, histories and logs, which hold
secrets and answers, and none of them is ever sent. A path with ``..``, or a symlink anywhere
along it (``latest`` is one), is refused, so nothing outside the results folder can be reached.
"""

from __future__ import annotations

import html
import json
import mimetypes
import sys
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote, unquote, urlsplit

__all__ = ["HOST", "SERVED", "build_server", "index_html", "resolve_request", "serve_main", "sweep_html"]

HOST = "127.0.0.1"
SERVED_NAMES = frozenset({"report.html", "report.md", "ramp.md", "table.md"})
SERVED_SUFFIXES = frozenset({".png"})
SERVED = "report.html, report.md, ramp.md, table.md and *.png"


def _allowed_name(name: str) -> bool:
    return name in SERVED_NAMES or Path(name).suffix in SERVED_SUFFIXES


def resolve_request(root: Path, url_path: str) -> Path | None:
    """The file a request may read, or None: only served names, no ``..``, no symlink on the way."""
    parts = [p for p in unquote(urlsplit(url_path).path).split("/") if p]
    if not parts or any(p in ("..", ".") or "\\" in p or "\x00" in p for p in parts):
        return None
    if not _allowed_name(parts[-1]):
        return None
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            return None
    return path if path.is_file() else None


def _iso(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return "-" if value is None else str(value)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _real_dirs(folder: Path) -> list[Path]:
    if not folder.is_dir() or folder.is_symlink():
        return []
    return sorted((p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True)


def _run_rows(root: Path, runs: Path) -> list[str]:
    rows = []
    for run in _real_dirs(runs):
        report = _read_json(run / "report.json")
        if report is None:
            continue  # a stack started by `proctor up` alone has no report
        link = quote(str(run.relative_to(root) / "report.html"))
        verdict = str(report.get("verdict") or "UNKNOWN") + (" (interrupted)" if report.get("interrupted") else "")
        has_page = (run / "report.html").is_file()
        name = html.escape(run.name)
        cell = f'<a class="run" href="/{link}">{name}</a>' if has_page else name
        rows.append(f"<tr><td>{cell}</td><td>{html.escape(verdict)}</td><td>{html.escape(str(report.get('name')))}"
                    f"</td><td>{html.escape(str(report.get('seed')))}</td>"
                    f"<td>{html.escape(_iso(report.get('started_at')))}</td></tr>")
    return rows


def _sweep_rows(root: Path, sweeps: Path) -> list[str]:
    rows = []
    for sweep in _real_dirs(sweeps):
        table = _read_json(sweep / "table.json")
        if table is None:
            continue
        runs = table.get("runs") or []
        failing = sum(not r.get("ok") for r in runs)
        link = quote(str(sweep.relative_to(root))) + "/"
        rows.append(f'<tr><td><a class="sweep" href="/{link}">{html.escape(sweep.name)}</a></td>'
                    f"<td>{len(runs)} runs, {failing} not as expected</td><td>exit {table.get('exit_code')}</td></tr>")
    return rows


def _page(title: str, parts: list[str]) -> str:
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            "<style>body{font-family:system-ui,sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:.2em .5em}"
            "table{border-collapse:collapse}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def sweep_html(root: Path, sweep: Path) -> str:
    """One sweep: its runs, each linked to its report, and its verdict table."""
    runs = _run_rows(root, sweep / "runs")
    table = quote(str(sweep.relative_to(root) / "table.md"))
    parts = [f"<h1>Sweep {html.escape(sweep.name)}</h1>", f'<p><a href="/{table}">table.md</a> · <a href="/">all results</a></p>']
    parts += (['<table id="runs"><tr><th>run</th><th>verdict</th><th>scenario</th><th>seed</th><th>started</th></tr>',
               *runs, "</table>"] if runs else ["<p>No checked run in this sweep.</p>"])
    return _page(f"Sweep {sweep.name}", parts)


def _sweep_dir(root: Path, url_path: str) -> Path | None:
    parts = [p for p in unquote(urlsplit(url_path).path).split("/") if p]
    if len(parts) != 2 or parts[0] != "sweep" or parts[1] in ("..", "."):
        return None
    folder = root / "sweep" / parts[1]
    ok = folder.is_dir() and not folder.is_symlink() and not (root / "sweep").is_symlink()
    return folder if ok else None


def index_html(root: Path) -> str:
    runs = _run_rows(root, root / "runs")
    sweeps = _sweep_rows(root, root / "sweep")
    parts = [f"<h1>Proctor results: {html.escape(str(root))}</h1>", "<h2>Runs</h2>"]
    parts += (['<table id="runs"><tr><th>run</th><th>verdict</th><th>scenario</th><th>seed</th><th>started</th></tr>',
               *runs, "</table>"] if runs else ["<p>No checked run in this folder yet.</p>"])
    parts += ["<h2>Sweeps</h2>"]
    parts += (['<table id="sweeps"><tr><th>sweep</th><th>runs</th><th>verdict</th></tr>', *sweeps, "</table>"]
              if sweeps else ["<p>No sweep in this folder yet.</p>"])
    return _page("Proctor results", parts)


class _Handler(BaseHTTPRequestHandler):
    root: Path = Path(".")
    server_version = "proctor-serve"
    sys_version = ""

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _refuse(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, "read-only: GET and HEAD only")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def _answer(self, body: bool) -> None:
        if urlsplit(self.path).path in ("", "/", "/index.html"):
            return self._send(index_html(self.root).encode("utf-8"), "text/html; charset=utf-8", body)
        sweep = _sweep_dir(self.root, self.path)
        if sweep is not None:
            return self._send(sweep_html(self.root, sweep).encode("utf-8"), "text/html; charset=utf-8", body)
        path = resolve_request(self.root, self.path)
        if path is None:
            return self.send_error(HTTPStatus.NOT_FOUND, f"not served (only {SERVED} inside the results folder)")
        kind = "text/plain; charset=utf-8" if path.suffix == ".md" else (
            mimetypes.guess_type(path.name)[0] or "application/octet-stream")
        self._send(path.read_bytes(), kind, body)

    def _send(self, data: bytes, kind: str, body: bool) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'none'; img-src data: 'self'; style-src 'unsafe-inline'")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"proctor serve: {self.address_string()} {format % args}\n")


def build_server(root: Path, port: int) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"root": root.resolve()})
    return ThreadingHTTPServer((HOST, port), handler)


def serve_main(argv: Sequence[str] | None = None) -> int:
    from stack.cli_args import CliParser, existing_dir
    from stack.paths import results_dir

    parser = CliParser(prog="proctor serve", description="Browse the runs and sweeps of a results folder "
                                                        "(127.0.0.1 only, read-only, reports and plots only).")
    parser.add_argument("results", nargs="?", type=existing_dir, default=None,
                        help="the results folder (default $PROCTOR_RESULTS_DIR or ./results)")
    parser.add_argument("--port", type=_port, default=8088, help="port on 127.0.0.1 (default 8088; 0: any free)")
    args = parser.parse_args(argv)
    root = (args.results or results_dir()).resolve()
    if not root.is_dir():
        return _say(f"proctor serve: no results folder at {root} (run `proctor demo` first, or name one)")
    try:
        server = build_server(root, args.port)
    except OSError as exc:
        return _say(f"proctor serve: argument --port: cannot listen on {HOST}:{args.port}: {exc.strerror}")
    print(f"proctor serve: {root} at http://{HOST}:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("proctor serve: stopped", flush=True)
    finally:
        server.server_close()
    return 0


def _port(text: str) -> int:
    from stack.cli_args import port_number

    return port_number(text)


def _say(line: str) -> int:
    print(line, file=sys.stderr)
    return 2
