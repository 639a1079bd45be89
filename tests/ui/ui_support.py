"""Helpers of the `trainop ui` tests (conftest.py beside this file has their fixtures): the
real server (`trainop ui` as a subprocess on a free loopback port, over a private TRAINOP_HOME)
driven by Debian's Chromium through Playwright.

Playwright's own browser download is not reachable here: the tests launch /usr/bin/chromium
(`apt-get install chromium`; .ci/run installs it) and are skipped where it is missing. Each
browser test saves a screenshot in $TRAINOP_UI_SCREENSHOTS (default build/ui-screenshots;
docs/ui.md shows a few, committed under docs/images/ui/).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.ui.security import Access

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


def start_server(home: Path, studies: Path, *options: str) -> Server:
    """`trainop ui` on a free port (with `options`, e.g. `-n NS`); returns once it printed its
    URL (it listens by then)."""
    command = [sys.executable, "-m", "trainop_core.cli.main", "ui", "--address", "127.0.0.1:0"]
    command += ["--studies", str(studies), *options]
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


def in_process(
    client: Any, studies: Path, namespace: str | None = None, token: str = "t0ken"
) -> tuple[Any, Access]:
    """The page's app over `client` (any backend), served in this process by Starlette's
    TestClient (no token sent unless a test sends it) and its Access; for the backends a
    subprocess cannot share (a test's kube-apiserver, a local Ray)."""
    from starlette.testclient import TestClient

    from trainop_core.ui.app import Settings, build_app

    access = Access(token, 80, frozenset())
    app = build_app(Settings(client, namespace, studies), access)
    return TestClient(app, base_url="http://testserver"), access


def authorised(access: Access) -> dict[str, str]:
    return {"Cookie": f"{access.cookie}={access.token}"}


def status(server: Server, method: str, path: str, **headers: str) -> int:
    """The status of one plain HTTP request to `server` (headers as given: Host, Origin...)."""
    return request(server, method, path, **headers)[0]


def request(server: Server, method: str, path: str, **headers: str) -> tuple[int, dict[str, str]]:
    """One plain HTTP request to `server`: its status and headers (lower-case names)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, headers={"Host": f"127.0.0.1:{server.port}", **headers})
        answer = connection.getresponse()
        answer.read()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}
    finally:
        connection.close()


def jobs_of(server: Server) -> list[dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    cookie = f"trainop-ui-{server.port}={server.token}"
    try:
        connection.request("GET", "/api/jobs", headers={"Cookie": cookie})
        return list(json.loads(connection.getresponse().read()))
    finally:
        connection.close()


HOSTILE = ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>")


def ticking_job(
    name: str, labels: dict[str, str] | None = None, lines: int = 600
) -> dict[str, Any]:
    """A PyTorchJob whose master prints `tick N loss=...` five times a second, then ends."""
    code = textwrap.dedent(
        f"""
        import sys, time
        for i in range(1, {lines} + 1):
            print(f"tick {{i}} loss={{1 / i:.5f}} step={{i}}", flush=True)
            print({HOSTILE[0]!r} + " " + {HOSTILE[1]!r}, flush=True)
            time.sleep(0.2)
        """
    )
    return script_job(name, code, labels=labels)


def script_job(
    name: str,
    code: str,
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    restart_policy: str = "Never",
) -> dict[str, Any]:
    """A PyTorchJob whose one master runs the Python `code`."""
    container = {"name": "pytorch", "image": "python", "command": ["python", "-c", code]}
    template = {"spec": {"containers": [container]}}
    replica = {"replicas": 1, "restartPolicy": restart_policy, "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica}},
    }
