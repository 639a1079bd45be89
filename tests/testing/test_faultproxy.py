"""The fault proxy in front of the real kube-apiserver, as the official client sees it."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from trainop_core.testing.builders import make_pod, wait_for
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.faultproxy import Fault, FaultProxy, RequestInfo, request_info

kubernetes = pytest.importorskip("kubernetes")
ApiException = kubernetes.client.exceptions.ApiException
ProtocolError = pytest.importorskip("urllib3").exceptions.ProtocolError


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy.for_control_plane(control_plane) as proxy:
        yield proxy


@pytest.fixture
def core(proxy: FaultProxy, control_plane: ControlPlane) -> Iterator[Any]:
    api = proxy.api_client(control_plane.admin_token, retries=False)  # see every fault
    yield kubernetes.client.CoreV1Api(api)
    api.close()


def configmap(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"k": name}}


@pytest.mark.parametrize(
    ("method", "target", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", RequestInfo("list", "pods", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods?watch=true", RequestInfo("watch", "pods", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods?watch=True", RequestInfo("watch", "pods", "ns")),
        ("GET", "/api/v1/watch/namespaces/ns/pods", RequestInfo("watch", "pods", "ns")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", RequestInfo("get", "pods/log", "ns", "p")),
        ("PUT", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j/status",
         RequestInfo("update", "pytorchjobs/status", "ns", "j")),
        ("DELETE", "/api/v1/namespaces/ns/pods", RequestInfo("deletecollection", "pods", "ns")),
        ("POST", "/api/v1/namespaces", RequestInfo("create", "namespaces")),
        ("DELETE", "/api/v1/namespaces/ns", RequestInfo("delete", "namespaces", "ns", "ns")),
        ("PATCH", "/api/v1/nodes/n", RequestInfo("patch", "nodes", "", "n")),
        ("GET", "/readyz", RequestInfo("get")),
        ("GET", "/apis", RequestInfo("get")),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_requests_are_classified_as_the_api_server_does(
    method: str, target: str, expected: RequestInfo
) -> None:
    assert request_info(method, target) == expected


def test_requests_pass_through_with_the_callers_identity(
    proxy: FaultProxy, control_plane: ControlPlane, k8s_namespace: str
) -> None:
    """RBAC stays the server's: a token without rights is refused behind the proxy too."""
    token = control_plane.service_account_token(k8s_namespace, "nobody")
    nobody = kubernetes.client.CoreV1Api(proxy.api_client(token))
    with pytest.raises(ApiException) as denied:
        nobody.list_namespaced_pod(k8s_namespace)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{k8s_namespace}:nobody" in denied.value.body
    assert proxy.stats.answers[("list", "pods", 403)] == 1


@pytest.mark.parametrize(
    "code", [500, 409, 429], ids=["internal error", "conflict", "too many requests"]
)
def test_the_next_matching_request_fails_once(
    proxy: FaultProxy, core: Any, k8s_namespace: str, code: int
) -> None:
    fault = proxy.fail("create", "pods", code=code)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(k8s_namespace, make_pod("p"))
    assert err.value.status == code
    if code == 429:
        assert err.value.headers["Retry-After"] == "1"
    assert core.create_namespaced_pod(k8s_namespace, make_pod("p")).metadata.name == "p"
    assert fault.applied == 1
    assert proxy.stats.answers[("create", "pods", code)] == 1
    assert proxy.stats.answers[("create", "pods", 201)] == 1


def test_faults_match_verb_resource_and_subresource(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    core.create_namespaced_pod(k8s_namespace, make_pod("p"))
    proxy.fail("patch", "pods/status", code=500, count=2)
    core.patch_namespaced_pod("p", k8s_namespace, {"metadata": {"labels": {"a": "b"}}})
    core.read_namespaced_pod("p", k8s_namespace)
    for _ in range(2):
        with pytest.raises(ApiException):
            core.patch_namespaced_pod_status("p", k8s_namespace, {"status": {"phase": "Running"}})
    core.patch_namespaced_pod_status("p", k8s_namespace, {"status": {"phase": "Running"}})


def test_added_latency(proxy: FaultProxy, core: Any, k8s_namespace: str) -> None:
    proxy.delay("list", "configmaps", seconds=0.5)
    started = time.monotonic()
    core.list_namespaced_config_map(k8s_namespace)
    assert time.monotonic() - started >= 0.5
    started = time.monotonic()
    core.list_namespaced_config_map(k8s_namespace)  # once only
    assert time.monotonic() - started < 0.5


def test_cutting_open_watches_ends_the_stream(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    rv = core.list_namespaced_pod(k8s_namespace).metadata.resource_version
    ended = threading.Event()

    def consume() -> None:
        response = core.list_namespaced_pod(
            k8s_namespace, watch=True, resource_version=rv, _preload_content=False
        )
        try:
            for _ in response.stream():
                pass
        except ProtocolError:  # a cut connection may surface as ProtocolError
            pass
        ended.set()

    threading.Thread(target=consume, daemon=True).start()
    wait_for(lambda: proxy.stats.open_watches == 1, timeout=10)
    assert proxy.cut_open_watches("services") == 0
    assert proxy.cut_open_watches("pods") == 1
    assert ended.wait(10)
    wait_for(lambda: proxy.stats.open_watches == 0, timeout=10)


def watch_names(core: Any, namespace: str, rv: str, seen: list[Any]) -> None:
    for event in kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=10
    ):
        seen.append(event)


def test_a_watch_cut_after_some_events_ends_mid_stream(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    rv = core.list_namespaced_config_map(k8s_namespace).metadata.resource_version
    for i in range(4):
        core.create_namespaced_config_map(k8s_namespace, configmap(f"cm-{i}"))
    proxy.cut_watch("configmaps", after_events=2)
    seen: list[Any] = []
    with pytest.raises(ProtocolError):
        watch_names(core, k8s_namespace, rv, seen)
    assert [e["object"].metadata.name for e in seen] == ["cm-0", "cm-1"]
    assert proxy.stats.watch_events == 2


def test_resuming_from_the_last_seen_version_after_a_cut_misses_nothing(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    rv = core.list_namespaced_config_map(k8s_namespace).metadata.resource_version
    core.create_namespaced_config_map(k8s_namespace, configmap("before"))
    proxy.cut_watch("configmaps", after_events=1)
    seen: list[Any] = []
    with pytest.raises(ProtocolError):
        watch_names(core, k8s_namespace, rv, seen)
    for name in ("during-1", "during-2"):
        core.create_namespaced_config_map(k8s_namespace, configmap(name))
    last = seen[-1]["object"].metadata.resource_version
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        core.list_namespaced_config_map, k8s_namespace, resource_version=last, timeout_seconds=10
    ):
        seen.append(event)
        if len(seen) == 3:
            watch.stop()
    assert [e["object"].metadata.name for e in seen] == ["before", "during-1", "during-2"]


def test_failing_watch_requests(proxy: FaultProxy, core: Any, k8s_namespace: str) -> None:
    proxy.fail("watch", "pods", code=500)
    with pytest.raises(ApiException) as err:
        list(kubernetes.watch.Watch().stream(core.list_namespaced_pod, k8s_namespace,
                                             timeout_seconds=1))  # fmt: skip
    assert err.value.status == 500


def test_a_dropped_connection_gets_no_answer(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    proxy.drop("list", "pods")
    with pytest.raises(ProtocolError):
        core.list_namespaced_pod(k8s_namespace)
    assert core.list_namespaced_pod(k8s_namespace).items == []


def test_a_lost_answer_hides_a_write_that_happened(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    proxy.lose("create", "configmaps")
    with pytest.raises(ProtocolError):
        core.create_namespaced_config_map(k8s_namespace, configmap("made"))
    with pytest.raises(ApiException) as again:  # the write reached the server all the same
        core.create_namespaced_config_map(k8s_namespace, configmap("made"))
    assert again.value.status == 409
    assert proxy.stats.answers[("create", "configmaps", 201)] == 1


def test_an_answer_cut_mid_body_breaks_the_read(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    proxy.cut_answer("create", "configmaps")
    with pytest.raises(ProtocolError):
        core.create_namespaced_config_map(k8s_namespace, configmap("half"))
    assert core.read_namespaced_config_map("half", k8s_namespace).data == {"k": "half"}


def test_a_half_open_connection_sends_nothing_until_the_client_gives_up(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    from urllib3.exceptions import ReadTimeoutError

    proxy.hang("list", "pods")
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        core.list_namespaced_pod(k8s_namespace, _request_timeout=(5, 1.5))
    assert 1.5 <= time.monotonic() - started < 10
    assert core.list_namespaced_pod(k8s_namespace).items == []


def test_a_stalled_connection_stays_open_and_forwards_nothing_either_way(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    from urllib3.exceptions import ReadTimeoutError

    rv = core.list_namespaced_config_map(k8s_namespace).metadata.resource_version
    watch = core.list_namespaced_config_map(
        k8s_namespace, watch=True, resource_version=rv, timeout_seconds=1,
        _preload_content=False, _request_timeout=(5, 3),
    )  # fmt: skip
    wait_for(lambda: proxy.stats.open_watches == 1, timeout=10)
    assert proxy.stall(watch="services") == 0
    assert proxy.stall(watch="configmaps") == 1
    core.create_namespaced_config_map(k8s_namespace, configmap("unseen"))  # another connection
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError):  # neither the event nor the end at 1 s comes through
        watch.read()
    assert time.monotonic() - started >= 2.5
    assert proxy.stats.watch_events == 0


def test_a_request_on_a_stalled_kept_alive_connection_is_answered_by_nobody(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    from urllib3.exceptions import ReadTimeoutError

    core.list_namespaced_config_map(k8s_namespace)  # one kept-alive connection, idle now
    assert proxy.stall() == 1
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        core.list_namespaced_config_map(k8s_namespace, _request_timeout=(5, 1))
    assert time.monotonic() - started >= 1
    assert core.list_namespaced_config_map(k8s_namespace).items == []  # a new connection
    assert proxy.stats.requests[("list", "configmaps")] == 3


def test_a_partition_cuts_every_client_off_until_healed(
    proxy: FaultProxy, control_plane: ControlPlane, k8s_namespace: str
) -> None:
    context = ssl.create_default_context(cafile=str(proxy.ca_file))
    port = int(proxy.url.rsplit(":", 1)[1])
    idle = context.wrap_socket(socket.create_connection(("127.0.0.1", port)),
                               server_hostname="127.0.0.1")  # fmt: skip
    wait_for(lambda: proxy._open_connections(), timeout=10)
    proxy.partition()
    idle.settimeout(10)
    assert idle.recv(1) == b""  # an idle kept-alive connection is closed too
    rest = proxy_rest(proxy, control_plane)
    with pytest.raises(Exception):  # noqa: B017  # no answer at all: RestError(0)
        rest.get(f"/api/v1/namespaces/{k8s_namespace}/pods")
    proxy.heal()
    assert rest.get(f"/api/v1/namespaces/{k8s_namespace}/pods")["items"] == []


def proxy_rest(proxy: FaultProxy, control_plane: ControlPlane) -> Any:
    from trainop_core.testing.rest import Rest

    return Rest(proxy.url, control_plane.admin_token, str(proxy.ca_file))


def test_request_counters_by_verb_and_resource(
    proxy: FaultProxy, core: Any, k8s_namespace: str
) -> None:
    core.create_namespaced_pod(k8s_namespace, make_pod("p"))
    core.read_namespaced_pod("p", k8s_namespace)
    core.list_namespaced_pod(k8s_namespace)
    core.read_namespaced_pod_status("p", k8s_namespace)
    watch = kubernetes.watch.Watch()
    for _ in watch.stream(core.list_namespaced_pod, k8s_namespace, timeout_seconds=5):
        watch.stop()
    requests = proxy.stats.requests
    assert (requests[("create", "pods")], requests[("get", "pods")],
            requests[("list", "pods")]) == (1, 1, 1)  # fmt: skip
    assert requests[("get", "pods/status")] == 1 and requests[("watch", "pods")] == 1
    assert proxy.stats.total_watches == 1 and proxy.stats.by_verb()["get"] == 2
    assert proxy.stats.count("*", "pods*") == 5


def test_a_kubeconfig_through_the_proxy_works_for_kubectl(
    proxy: FaultProxy, control_plane: ControlPlane, k8s_namespace: str, tmp_path: Any
) -> None:
    import subprocess

    config = proxy.kubeconfig_for(control_plane.admin_token, tmp_path / "kc",
                                  namespace=k8s_namespace)  # fmt: skip
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(config), "create", "configmap", "via-proxy"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert proxy.stats.requests[("create", "configmaps")] == 1
    got = control_plane.rest.get(f"/api/v1/namespaces/{k8s_namespace}/configmaps/via-proxy")
    assert got["metadata"]["name"] == "via-proxy"


def test_an_unknown_action_is_refused() -> None:
    with pytest.raises(ValueError, match="action"):
        Fault("explode")
