"""Fixtures of the `trainop ui` tests (helpers in ui_support.py): a private TRAINOP_HOME and
studies directory, a local client, `trainop ui` on a free port, Debian's Chromium, a page."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_support import CHROMIUM, CHROMIUM_ARGS, Server, Watched, start_server

from trainop_core.backends.local import LocalBackend
from trainop_core.client import TrainingClient


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
