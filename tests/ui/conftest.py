"""`trainop ui` tests: the real server (`trainop ui` as a subprocess on a free loopback port,
over a private TRAINOP_HOME) driven by Debian's Chromium through Playwright.

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
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainop_core.backends.local import LocalBackend
from trainop_core.client import TrainingClient

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


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-home")


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-studies")


@pytest.fixture(scope="module")
def client(home: Path) -> Iterator[TrainingClient]:
    client = TrainingClient(LocalBackend(home=home))
    yield client
    for job in client.list():
        client.delete(job.name, job.namespace)


@pytest.fixture(scope="module")
def server(home: Path, studies: Path) -> Iterator[Server]:
    server = start_server(home, studies)
    yield server
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


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


@pytest.fixture
def page(browser: Any) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    watched = Watched(page)

    def dialog(d: Any) -> None:
        watched.dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    page.on("dialog", dialog)
    page.on("pageerror", lambda err: watched.errors.append(str(err)))
    yield watched
    context.close()
    assert watched.errors == [], "the page's script failed"


@pytest.fixture
def name() -> str:
    return f"ui-{uuid.uuid4().hex[:8]}"
