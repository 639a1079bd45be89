"""Helpers of the `trainop ui` tests (conftest.py beside this file has their fixtures): the
real server (`trainop ui` as a subprocess on a free loopback port, over a private TRAINOP_HOME)
driven by Debian's Chromium through Playwright.

Playwright's own browser download is not reachable here: the tests launch /usr/bin/chromium
(`apt-get install chromium`; .ci/run installs it) and are skipped where it is missing. Each
browser test saves a screenshot in $TRAINOP_UI_SCREENSHOTS (default build/ui-screenshots;
docs/ui.md shows a few, committed under docs/images/ui/).
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(os.environ.get("TRAINOP_UI_SCREENSHOTS") or REPO / "build" / "ui-screenshots")
PYTHONPATH = os.pathsep.join(str(REPO / p) for p in ("", "integrations/hpo"))
URL_LINE = re.compile(r"trainop ui: (http://127\.0\.0\.1:(\d+))/\?token=([\w-]+)")
STARTUP_SECONDS = 60.0


@dataclass
class Server:
    url: str  # with the token, as printed
    base: str
    port: int
    token: str
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)


def ui_env(home: Path) -> dict[str, str]:
    return {**os.environ, "TRAINOP_HOME": str(home), "PYTHONPATH": PYTHONPATH}


def start_server(home: Path, studies: Path) -> Server:
    """`trainop ui` on a free port; returns once it printed its URL (it listens by then)."""
    command = [sys.executable, "-m", "trainop_core.cli.main", "ui", "--address", "127.0.0.1:0"]
    command += ["--studies", str(studies)]
    process = subprocess.Popen(
        command,
        env=ui_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=STARTUP_SECONDS)
            match = URL_LINE.search(line)
            if match:
                url = match.group(0).removeprefix("trainop ui: ")
                base, port, token = match.group(1), int(match.group(2)), match.group(3)
                return Server(url, base, port, token, process, output)
    except queue.Empty:
        process.kill()
        raise AssertionError(f"trainop ui printed no URL: {''.join(output)}") from None


@dataclass
class Watched:
    """A page and what it did that a test must see: dialogs (alert, confirm), script errors."""

    page: Any
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path
