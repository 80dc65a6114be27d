"""``report.html``: one self-contained page per run, like Locust's HTML report.

It holds what report.md holds, for a browser: the verdict and its counts, the interruption if
any, every checker's counts, notes and examples, the derived bounds, the faults, the plots
inline (``data:`` URIs) and the command that reproduces the run. Nothing is fetched: no
script, no stylesheet or font from elsewhere, so the page opens offline, from a CI artifact,
or through ``proctor serve``. Every value is HTML-escaped: examples carry user input.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any, Mapping

from chaos.report import check_word, headline_counts

__all__ = ["REPORT_HTML", "render_html", "write_html"]

REPORT_HTML = "report.html"
_EXAMPLE_CHARS = 600
_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
code,pre{background:#f4f4f4;font-size:.9em} pre{padding:.6em;overflow-x:auto}
.verdict{font-size:1.3em;padding:.4em .8em;display:inline-block;border-radius:4px;color:#fff}
.VALID{background:#2a7d2a} .INVALID{background:#b00020} .UNKNOWN{background:#8a6d00} .na{color:#777}
.cut{background:#fff3cd;padding:.5em;border-left:4px solid #8a6d00}
img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _clip(value: Any) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= _EXAMPLE_CHARS else text[: _EXAMPLE_CHARS - 3] + "..."


def _verdict(report: Mapping[str, Any]) -> list[str]:
    word = str(report.get("verdict", "UNKNOWN"))
    parts = [f'<p><span class="verdict {_e(word)}" id="verdict">{_e(word)}</span> '
             f'{_e(headline_counts(report.get("summary") or {}))}</p>']
    cut = report.get("interrupted")
    if cut is not None:
        parts.append(f'<p class="cut" id="interrupted"><b>Interrupted</b> by {_e(cut.get("signal"))} during '
                     f'{_e(cut.get("phase"))}: the run did not finish, so nothing here is a verdict on the stack.</p>')
    if report.get("description"):
        parts.append(f"<p>{_e(report['description'])}</p>")
    parts.append(f"<p>Seed <code>{_e(report.get('seed'))}</code>, TIME_SCALE {_e(report.get('time_scale'))}.</p>")
    parts.append(f"<p>Reproduce:</p><pre id=\"reproduce\">{_e(report.get('reproduce') or '(none recorded)')}</pre>")
    notes = list(report.get("harness_notes") or []) + list(report.get("notes") or [])
    if notes:
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    return parts


def _summary_table(checkers: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, check in checkers.items():
        problems = ", ".join(f"{k} {check['counts'].get(k)}" for k in check.get("violations", [])) or "-"
        word = check_word(check)
        rows.append(f'<tr><td><a href="#checker-{_e(name)}">{_e(name)}</a></td>'
                    f'<td class="{"na" if word == "n/a" else _e(word)}">{_e(word)}</td>'
                    f"<td>{_e(check.get('na') or problems)}</td></tr>")
    return ["<h2>Checkers</h2>", '<table id="checkers"><tr><th>checker</th><th>verdict</th><th>problems</th></tr>',
            *rows, "</table>"]


def _checker(name: str, check: Mapping[str, Any]) -> list[str]:
    parts = [f'<h2 id="checker-{_e(name)}">{_e(name)}: {_e(check_word(check))}</h2>']
    counts = check.get("counts") or {}
    if counts:
        parts.append("<table><tr>" + "".join(f"<th>{_e(k)}</th>" for k in counts) + "</tr><tr>"
                     + "".join(f"<td>{_e(v)}</td>" for v in counts.values()) + "</tr></table>")
    if check.get("notes"):
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in check["notes"]) + "</ul>")
    for category, examples in (check.get("examples") or {}).items():
        parts.append(f"<p>{_e(category)} (first {len(examples)} of {_e(counts.get(category, len(examples)))}):</p>")
        parts.append("<pre>" + "\n".join(_e(_clip(x)) for x in examples) + "</pre>")
    return parts


def _bounds(bounds: Mapping[str, Any] | None) -> list[str]:
    if not bounds:
        return []
    parts = ["<h2>Derived bounds</h2>", "<p>Derived from this run's measured kills, restarts and service times "
             "(chaos/bounds.py).</p>", '<table id="bounds"><tr><th>bound</th><th>value</th><th>formula</th>'
             "<th>terms</th></tr>"]
    for name, bound in bounds.items():
        value = bound.get("value")
        shown = f"underivable: {bound.get('note', '')}" if value is None else f"{value} s"
        parts.append(f"<tr><td>{_e(name)}</td><td>{_e(shown)}</td><td><code>{_e(bound.get('formula'))}</code></td>"
                     f"<td><code>{_e(_clip(bound.get('terms', {})))}</code></td></tr>")
    return parts + ["</table>"]


def _faults(faults: list[Mapping[str, Any]]) -> list[str]:
    if not faults:
        return ["<h2>Faults</h2>", "<p>No faults were injected.</p>"]
    rows = "".join(f"<tr><td>{_e(f.get('fault_id'))}</td><td>{_e(f.get('kind'))}</td><td>{_e(f.get('target'))}</td>"
                   f"<td>{_e(_seconds(f.get('start')))}</td><td>{_e(_seconds(f.get('end'), 'never healed'))}</td></tr>"
                   for f in faults)
    return ["<h2>Faults</h2>", "<table><tr><th>#</th><th>kind</th><th>target</th><th>from</th><th>to</th></tr>",
            rows, "</table>"]


def _seconds(value: Any, missing: str = "-") -> str:
    return missing if not isinstance(value, (int, float)) else f"{value:.2f} s"


def _plots(run_dir: Path, names: list[str]) -> list[str]:
    parts = ["<h2>Plots</h2>"] if names else []
    for name in names:
        path = run_dir / name
        if path.is_file() and not path.is_symlink():
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            parts.append(f'<figure><img class="plot" alt="{_e(Path(name).stem)}" '
                         f'src="data:image/png;base64,{data}"><figcaption>{_e(name)}</figcaption></figure>')
    return parts


def render_html(report: Mapping[str, Any], run_dir: Path) -> str:
    title = f"Proctor run report: {report.get('name') or '(unnamed)'}"
    body = [f"<h1>{_e(title)}</h1>", *_verdict(report), *_summary_table(report.get("checkers") or {}),
            *_bounds(report.get("bounds")), *_faults(list(report.get("faults") or [])),
            *_plots(run_dir, list(report.get("plots") or []))]
    for name, check in (report.get("checkers") or {}).items():
        body += _checker(name, check)
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def write_html(run_dir: Path, report: Mapping[str, Any]) -> Path:
    path = run_dir / REPORT_HTML
    path.write_text(render_html(report, run_dir), encoding="utf-8")
    return path
