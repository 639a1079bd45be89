"""What an audit of `trainop ui` as a user and as an attacker asked for: every route behind the
token (enumerated from the app itself), no other protocol served, a redirect only to this
server, strict numeric parameters, the page scoped to one namespace, bounded metric streams,
and a failed, restarted replica's restarts, exit code and events."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_support import (
    Server,
    authorised,
    in_process,
    request,
    script_job,
    start_server,
    status,
    ticking_job,
)

from trainop_core.backends.base import LogLine
from trainop_core.backends.local import LocalBackend
from trainop_core.client import TrainingClient
from trainop_core.testing.builders import wait_for
from trainop_core.ui.security import same_server_path

pytest.importorskip("starlette")


@pytest.fixture(scope="module")
def app(client: TrainingClient, studies: Path) -> Any:
    return in_process(client, studies)


def concrete(path: str) -> str:
    """A route's path with every {parameter} filled in."""
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: "x" if m.group(1) != "path" else "app.js", path)


def every_route(test_client: Any) -> Iterator[tuple[str, str]]:
    from starlette.routing import Mount, Route

    starlette_app = test_client.app.app  # the Guard's inner Starlette app
    for route in starlette_app.routes:
        if isinstance(route, Route):
            for method in sorted(route.methods or {"GET"}):
                yield method, concrete(route.path)
        elif isinstance(route, Mount):
            yield "GET", concrete(route.path) + "/app.js"
        else:
            raise AssertionError(f"a route of a kind this test does not know: {route!r}")


def test_every_route_of_the_app_answers_401_without_the_token(app: Any) -> None:
    test_client, _ = app
    routes = list(every_route(test_client))
    assert ("POST", "/api/jobs/x/x/delete") in routes and ("GET", "/static/app.js") in routes
    for method, path in routes:
        answer = test_client.request(method, path)
        assert answer.status_code == 401, (method, path, answer.status_code)


def test_a_websocket_is_refused_at_its_handshake(app: Any) -> None:
    from starlette.websockets import WebSocketDisconnect

    test_client, access = app
    for path in ("/", "/api/jobs/watch", "/static/app.js"):
        with (
            pytest.raises(WebSocketDisconnect) as refused,
            test_client.websocket_connect(path, headers=authorised(access)),
        ):
            pass
        assert refused.value.code == 1008


def test_an_upgrade_request_gets_400_and_no_traceback(server: Server) -> None:
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    upgrade["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ=="
    cookie = {"Cookie": f"trainop-ui-{server.port}={server.token}"}
    assert status(server, "GET", "/api/jobs/watch", **upgrade, **cookie) == 400
    assert status(server, "GET", "/", Upgrade="h2c", Connection="Upgrade", **cookie) == 400
    assert status(server, "GET", "/api/jobs", **cookie) == 200  # still serving
    assert "Traceback" not in "".join(server.output)


@pytest.mark.parametrize(
    "path",
    ["//evil.example", "//evil.example/x", "/\\evil.example", "/\\\\evil.example", "///evil"],
    ids=["two slashes", "two slashes and a path", "a backslash", "two backslashes", "three"],
)
def test_the_token_redirect_stays_on_this_server(server: Server, path: str) -> None:
    answer, headers = request(server, "GET", f"{path}?token={server.token}&next=//evil.example")
    assert answer == 303
    location = headers["location"]
    assert location.startswith("/") and not location.startswith("//"), location
    assert "\\" not in location and "evil.example/" not in location.split("?")[0]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", "/"),
        ("/#/job/a/b", "/%23/job/a/b"),
        ("//evil.example", "/"),
        ("/\\evil.example", "/%5Cevil.example"),
        ("https://evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("/a b%", "/a%20b%25"),
    ],
)
def test_a_redirect_location_is_only_ever_a_path_here(path: str, expected: str) -> None:
    assert same_server_path(path) == expected


@pytest.mark.parametrize(
    "tail",
    ["abc", "-1", "1e3", "5001", "99999999999999999999", "٣", " 5", "0x10", "1.5"],
    ids=[
        "letters",
        "negative",
        "exponent",
        "over the bound",
        "huge",
        "a non-ASCII digit",
        "a space",
        "hex",
        "a fraction",
    ],
)
def test_a_bad_tail_gets_400_naming_it(app: Any, client: TrainingClient, tail: str) -> None:
    test_client, access = app
    answer = test_client.get(
        "/api/jobs/default/any/logs", params={"tail": tail}, headers=authorised(access)
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"].startswith("tail: expected a whole number from 0 to 5000")


def test_a_page_scoped_to_a_namespace_answers_404_for_another(
    client: TrainingClient, studies: Path
) -> None:
    name = f"ui-{uuid.uuid4().hex[:8]}"
    client.create(ticking_job(name, lines=3000))  # in "default"
    scoped, access = in_process(client, studies, namespace="team-a")
    mine, _ = in_process(client, studies)
    headers = authorised(access)
    base = f"/api/jobs/default/{name}"
    assert mine.get(base, headers=authorised(access)).status_code == 200
    rows = scoped.get("/api/jobs", headers=headers).json()
    assert all(row["namespace"] == "team-a" for row in rows)
    for method, path in [
        ("GET", base),
        ("GET", f"{base}/watch"),
        ("GET", f"{base}/yaml"),
        ("GET", f"{base}/logs"),
        ("GET", f"{base}/metrics"),
        ("POST", f"{base}/delete"),
    ]:
        extra = {"Origin": "http://testserver", "X-Trainop-CSRF": access.csrf}
        answer = scoped.request(method, path, headers={**headers, **extra})
        assert answer.status_code == 404, (method, path, answer.text)
        assert f"default/{name} not found" in answer.json()["error"]
    assert client.get(name).name == name  # the scoped page's delete did nothing
    client.delete(name)


def test_trainop_ui_n_lists_only_that_namespace(tmp_path: Path) -> None:
    home = tmp_path / "home"
    local = TrainingClient(LocalBackend(home=home))
    local.create(ticking_job("in-default", lines=1))
    local.create(script_job("in-team-a", "print('hi')", namespace="team-a"))
    server = start_server(home, tmp_path, "-n", "team-a")
    try:
        from ui_support import jobs_of

        assert [(r["namespace"], r["name"]) for r in jobs_of(server)] == [("team-a", "in-team-a")]
        cookie = {"Cookie": f"trainop-ui-{server.port}={server.token}"}
        assert status(server, "GET", "/api/jobs/default/in-default", **cookie) == 404
        assert status(server, "GET", "/api/jobs/team-a/in-team-a", **cookie) == 200
    finally:
        server.process.terminate()
        server.process.wait(timeout=30)
        for job in local.list():
            local.delete(job.name, job.namespace)


def test_a_metric_stream_keeps_at_most_max_metrics_names() -> None:
    from trainop_core.ui.views import MAX_METRICS, metric_points

    lines = (LogLine("master-0", f"m{i}=1.0 step={i}") for i in range(10_000))
    points = list(metric_points(lines))
    names = {name for point in points for name in point["values"]}
    assert names == {f"m{i}" for i in range(MAX_METRICS)}
    wide = LogLine("master-0", " ".join(f"w{i}={i}" for i in range(600)))  # < 8192 chars
    (point,) = metric_points([wide])
    assert len(point["values"]) == MAX_METRICS


def test_a_failed_and_restarted_replica_shows_restarts_exit_code_and_events(
    app: Any, client: TrainingClient, tmp_path: Path
) -> None:
    """Its first run exits 3 and is restarted in place (OnFailure); the second succeeds."""
    name = f"ui-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "ran-once"
    code = (
        f"import pathlib, sys; p = pathlib.Path({str(marker)!r}); first = not p.exists()\n"
        "p.touch(); print('attempt', flush=True); sys.exit(3 if first else 0)"
    )
    job = script_job(name, code, restart_policy="OnFailure")
    job["spec"]["runPolicy"] = {"backoffLimit": 3}
    client.create(job)
    test_client, access = app
    headers = authorised(access)

    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = test_client.get(f"/api/jobs/default/{name}", headers=headers).json()
        return body if body["state"] in ("Succeeded", "Failed") else None

    view = wait_for(finished, timeout=120, interval=0.2)
    assert view["state"] == "Succeeded"
    (pod,) = view["pods"]
    assert (pod["replica"], pod["phase"], pod["restarts"], pod["exitCode"]) == (
        "master-0",
        "Succeeded",
        1,
        0,
    )
    events = {(e["reason"], e["message"]) for e in view["events"]}
    assert ("ExitedWithCode", f"Pod: default.{name}-master-0 exited with code 0") in events
    log = test_client.get(f"/api/jobs/default/{name}/logs", headers=headers).text
    assert "container exited with code 3; restart 1 follows" in log  # the first run's code
    client.delete(name)
