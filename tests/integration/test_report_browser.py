"""report.html and `proctor serve` in a real headless browser (Debian's chromium), issue #27.

The index is loaded through the server, each run link followed, and the report page rendered
to a screenshot kept in the test's output folder. "The plots load" is judged on the pixels:
the screenshot of the real page must hold far more of the plots' colours than the same page
with its images removed (the control, so the check can fail). Outside CI a missing browser
skips with one line; under CI=true it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from chaos.browse.serve import build_server
from test_browse import make_results

pytestmark = pytest.mark.integration

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed (scripts/setup.sh installs it on Debian)")
    pytest.skip("chromium not installed: the browser test of report.html is skipped (CI runs it)")


def _browse(browser: str, profile: Path, url: str, *extra: str) -> str:
    done = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *extra, url], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _plot_pixels(png: Path) -> int:
    """Pixels that are not page white (sampled): the plots are most of the drawn area of the page."""
    from PIL import Image

    data = Image.open(png).convert("L").resize((320, 1500)).tobytes()
    return sum(1 for value in data if value < 235)


def test_report_and_run_list_in_a_real_browser(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    browser = _chromium()
    results = tmp_path / "results"
    run = make_results(results)
    server = build_server(results, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    out = Path(os.environ.get("PROCTOR_TEST_OUTPUT", tmp_path))
    try:
        index = _browse(browser, tmp_path / "p1", base + "/", "--dump-dom")
        links = re.findall(r'<a class="run" href="(/[^"]+)"', index)
        assert links == [f"/runs/{run.name}/report.html"], index[:2000]
        shot = out / "report-screenshot.png"
        _browse(browser, tmp_path / "p3", base + links[0], f"--screenshot={shot}", "--window-size=1280,6000")
        # The control: the same page without its images, opened from a file.
        bare = tmp_path / "bare.html"
        bare.write_text(re.sub(r'<img class="plot"[^>]*>', "", (run / "report.html").read_text()))
        control = tmp_path / "control.png"
        _browse(browser, tmp_path / "p4", bare.as_uri(), f"--screenshot={control}", "--window-size=1280,6000")
    finally:
        server.shutdown()
        server.server_close()
    with_plots, without = _plot_pixels(shot), _plot_pixels(control)
    print(f"screenshot {shot}: {with_plots} non-white pixels (sampled), control without images {without}")
    assert with_plots > 2 * max(without, 100), (with_plots, without)
    request.node.user_properties.append(("screenshot", str(shot)))
