"""Sample one stack process with py-spy (``pip install -e .[dev]`` installs it) and summarise.

``py-spy record --gil`` samples only the thread holding the GIL, so the shares below are
shares of the Python CPU time of that process, not of wall time spent waiting. The raw
output is collapsed stacks (``frame;frame;... count``); the summary is the share of samples
whose innermost frame is a function ("self"), and the share per package of that innermost
frame (our ``stack``, ``starlette``, ``sqlalchemy``, the standard library, ...), and the
share of samples that are inside each function of our own ``stack`` package (inclusive).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["start_profile", "summarise"]

_OURS = ("stack", "chaos")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^():]*)(?::\d+)?\)$")


def start_profile(pid: int, seconds: float, output: Path, rate: int = 100) -> subprocess.Popen:
    """py-spy recording ``pid`` for ``seconds``; a missing binary names the package."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(binary).exists():
        raise FileNotFoundError("py-spy not found: pip install py-spy (in the dev extra)")
    argv = [binary, "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))), "--rate", str(rate),
            "--gil", "--nonblocking", "--format", "raw", "--output", str(output)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _package(file: str) -> str:
    """py-spy names files relative to their sys.path entry: the first part is the package."""
    parts = Path(file).parts
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1:]
    top = parts[0].removesuffix(".py") if parts else ""
    if not top or top.startswith("<") or top in sys.stdlib_module_names or len(parts) == 1 and top not in _OURS:
        return "python (stdlib)"
    return top


def summarise(collapsed: Path, top: int = 15) -> dict[str, Any]:
    """Top innermost functions and packages by share of samples."""
    by_function: Counter[str] = Counter()
    by_package: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_split(frame) for frame in stack.split(";")]
        function, file = frames[-1]
        by_function[f"{function} ({Path(file).name})"] += int(count)
        by_package[_package(file)] += int(count)
        for name in {f"{function} ({Path(file).name})" for function, file in frames if _package(file) == "stack"}:
            ours[name] += int(count)
        total += int(count)
    share = (lambda n: round(n / total, 3)) if total else (lambda n: 0.0)
    return {"samples": total, "self_by_function": [[name, share(n)] for name, n in by_function.most_common(top)],
            "self_by_package": [[name, share(n)] for name, n in by_package.most_common(top)],
            "inclusive_by_stack_function": [[name, share(n)] for name, n in ours.most_common(top)]}


def _split(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame)
    return (match["function"], match["file"]) if match else (frame, "")
