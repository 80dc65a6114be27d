"""`proctor digest`: the exam digest, one screen, from each web node's ``/metrics`` over HTTP.

What an on-call engineer watches during an exam (#12): per node requests and 5xx; per lane
depth, oldest-job age and failed jobs; pending outcomes; outbox lag; and, with ``--watch``,
starts and submissions (answers, finishes) per minute from the per-route latency
histograms' counts between two screens. It reads nothing but HTTP, so it works against any
deployment whose node URLs it is given (``--url``, repeatable) or finds in a run folder's
``manifest.json`` (``web_1``, ``web_2``, …).

The exam lock comes from the admin API and CPU per component from ``/proc`` of a local run's
manifest pids (chaos/digest/sources.py); either is printed as ``n/a`` with its reason rather
than left out when its source is missing (no admin URL, or a deployment on another machine).
Per lane finish -> outcome latency is the ``proctor_lane_latency_seconds`` histogram of
``/metrics``; the screen shows each kind's count and the bucket its median falls in.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import httpx

from stack.cli_args import CliParser, positive_float
from chaos.digest.sources import component_cpu, cpu_lines, fetch_lock, lock_line, shipper_line
from stack import paths
from stack.admin_client import TOKEN_ENV, AdminTargetError, resolve_target
from stack.headers import ADMIN_TOKEN_HEADER
from stack.embedded.registry import running_stacks

__all__ = ["NodeScrape", "digest_main", "parse_metrics", "render_digest", "scrape"]

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
ROUTES = {"starts": ("POST", "/v1/attempts"), "answers": ("PUT", "/v1/attempts/{attempt_id}/answers/{question}"),
          "finishes": ("POST", "/v1/attempts/{attempt_id}/finish")}


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of a Prometheus text exposition; comments skipped."""
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if line.startswith("#") or match is None:
            continue
        name, labels, value = match.groups()
        samples.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    return samples


@dataclass
class NodeScrape:
    url: str
    error: str | None = None
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def value(self, name: str, **labels: str) -> float | None:
        found = [v for n, l, v in self.samples if n == name and all(l.get(k) == want for k, want in labels.items())]
        return sum(found) if found else None


def scrape(urls: Sequence[str], admin_token: str, timeout: float = 5.0) -> list[NodeScrape]:
    """Each node's /metrics, with the admin token its admin listener asks for."""
    scrapes = []
    for url in urls:
        try:
            response = httpx.get(f"{url.rstrip('/')}/metrics", timeout=timeout, headers={ADMIN_TOKEN_HEADER: admin_token})
            response.raise_for_status()
            scrapes.append(NodeScrape(url, samples=parse_metrics(response.text)))
        except httpx.HTTPError as exc:
            scrapes.append(NodeScrape(url, error=f"{type(exc).__name__}: {exc}"))
    return scrapes


def _route_count(node: NodeScrape, what: str) -> float:
    method, route = ROUTES[what]
    return node.value("proctor_http_request_duration_seconds_count", method=method, route=route) or 0.0


def _fmt(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:g}{unit}"


def _median_bucket(node: NodeScrape, kind: str) -> str:
    """``count n, median <= b s`` from the kind's cumulative buckets (n/a before any is done)."""
    buckets = sorted(((float(l["le"]), v) for n, l, v in node.samples
                      if n == "proctor_lane_latency_seconds_bucket" and l.get("kind") == kind), key=lambda b: b[0])
    count = buckets[-1][1] if buckets else 0
    if not count:
        return "n/a"
    bound = next(le for le, cumulative in buckets if cumulative >= count / 2)
    return f"{count:g} done, median <= {bound:g} s"


def render_digest(now: list[NodeScrape], before: list[NodeScrape] | None = None, interval: float | None = None,
                  lock: dict | str | None = None, cpu: list[str] | None = None, shipping: str | None = None) -> str:
    """One screen of text; rates need the previous screen's scrape and the seconds between.
    ``lock`` is the admin API's lock state (or why it is unknown), ``cpu`` the CPU lines."""
    lines = [f"proctor digest  {time.strftime('%H:%M:%S')}", "", "node                           requests   5xx  draining"]
    for node in now:
        if node.error:
            lines.append(f"{node.url:<30} unreachable: {node.error}")
            continue
        lines.append(f"{node.url:<30} {_fmt(node.value('proctor_http_requests_total')):>8} "
                     f"{_fmt(node.value('proctor_http_5xx_total')):>5}  {_fmt(node.value('proctor_draining'))}")
    up = [n for n in now if not n.error]
    if before and interval:
        rates = [f"{what} {60 * (sum(_route_count(n, what) for n in up) - sum(_route_count(b, what) for b in before if not b.error)) / interval:.0f}/min"
                 for what in ROUTES]
        lines += ["", "rates: " + ", ".join(rates)]
    else:
        lines += ["", "rates: n/a until the second screen (--watch)"]
    head = up[0] if up else NodeScrape("")
    lines += ["", "lane     depth  oldest age  failed  finish -> outcome"]
    for lane, kind in (("merit", "merit"), ("ai", "narrative"), ("sms", "sms")):
        lines.append(f"{lane:<8} {_fmt(head.value('proctor_lane_depth', lane=lane)):>5}  "
                     f"{_fmt(head.value('proctor_lane_oldest_job_age_seconds', lane=lane), ' s'):>10}  "
                     f"{_fmt(head.value('proctor_lane_failed_jobs', lane=lane)):>6}  {_median_bucket(head, kind)}")
    lines += ["", f"pending outcomes {_fmt(head.value('proctor_pending_outcomes'))}   "
                  f"outbox lag {_fmt(head.value('proctor_outbox_lag_seconds'), ' s')}", lock_line(lock),
              *([shipping] if shipping else []), ""]
    return "\n".join(lines + (cpu or cpu_lines({}, None, None)))


def _the_running_stack(parser: CliParser) -> Path:
    """Neither a run folder nor --url: the one stack running under the results folder, as `proctor down` picks."""
    stacks = running_stacks(paths.runs_dir())
    if len(stacks) == 1:
        return stacks[0].run_dir
    if not stacks:
        parser.error(f"no stack is running under {paths.runs_dir()}: start one with `proctor up`, "
                     "or name a run folder or the nodes (--url, repeatable)")
    parser.error(f"{len(stacks)} stacks are running; name one's run folder, or the nodes (--url): "
                 + ", ".join(str(s.run_dir) for s in stacks))


def _manifest(run_dir: Path | None) -> dict | None:
    return json.loads((run_dir / "manifest.json").read_text()) if run_dir else None


def _node_urls(manifest: dict) -> list[str]:
    # /metrics is on the admin listeners only (never the public ones, never through HAProxy)
    return [url for name, url in sorted(manifest.get("urls", {}).items()) if re.fullmatch(r"web_\d+_admin", name)]


def _metrics_token(admin: tuple[str, str] | None, parser: CliParser) -> str:
    """The admin client's token (the run folder's, or with --admin-url the environment's); with
    --url alone, $PROCTOR_ADMIN_TOKEN."""
    token = admin[1] if admin else os.environ.get(TOKEN_ENV, "")
    if not token:
        parser.error(f"--url needs {TOKEN_ENV} in the environment: /metrics asks for the admin token")
    return token


def _admin(run_dir: Path | None, admin_url: str | None) -> tuple[str, str] | None:
    """The exam lock's source through the one admin client; None (printed as n/a) when there is none."""
    if not (run_dir or admin_url):
        return None
    try:
        target = resolve_target(run_dir, admin_url)
    except AdminTargetError:
        return None
    return target.url, target.token
    return None


def digest_main(argv: Sequence[str] | None = None) -> int:
    parser = CliParser(prog="proctor digest", description="The exam digest from each node's /metrics.")
    parser.add_argument("run_dir", nargs="?", type=Path,
                        help="a running stack's run folder (its manifest.json names the nodes); default: the one "
                             "stack running under $PROCTOR_RESULTS_DIR/runs (or ./results/runs)")
    parser.add_argument("--url", action="append", default=[], help="a web node's admin listener, where /metrics is (repeatable; "
                        "token from PROCTOR_ADMIN_TOKEN); instead of run_dir")
    parser.add_argument("--admin-url", default=None, help="a node's admin listener for the exam lock "
                                                         "(token from PROCTOR_ADMIN_TOKEN); default the manifest's")
    parser.add_argument("--watch", type=positive_float, default=None, metavar="SECONDS",
                        help="refresh every SECONDS until Ctrl-C")
    args = parser.parse_args(argv)
    if args.run_dir is None and not args.url:
        args.run_dir = _the_running_stack(parser)
    if args.run_dir is not None and not (args.run_dir / "manifest.json").is_file():
        parser.error(f"argument run_dir: {args.run_dir} holds no manifest.json (a running stack's run folder, "
                     f"e.g. results/runs/latest)")
    manifest = _manifest(args.run_dir)
    urls = args.url or (_node_urls(manifest) if manifest else [])
    if not urls:
        parser.error("name the nodes: a run folder with a manifest.json, or --url (repeatable)")
    admin = _admin(args.run_dir, args.admin_url)
    token = _metrics_token(admin, parser)
    before, cpu_before, at = None, None, time.monotonic()
    while True:
        now, cpu, taken = scrape(urls, token), component_cpu(manifest), time.monotonic()
        lock = fetch_lock(*admin) if admin else None
        screen = render_digest(now, before, taken - at, lock, cpu_lines(cpu, cpu_before, taken - at),
                               shipper_line(args.run_dir))
        print(("\033[2J\033[H" if args.watch else "") + screen, flush=True)
        if args.watch is None:
            return 0 if all(not n.error for n in now) else 1
        before, cpu_before, at = now, cpu, taken
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0
