"""CRUD, validation, patches, selectors and pagination through the official client."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from trainop_core.testing import ApiServer
from trainop_core.testing.apiserver.patch import strategic_merge_patch
from trainop_core.testing.builders import make_pod

kubernetes = pytest.importorskip("kubernetes")
ApiException = kubernetes.client.exceptions.ApiException


def reason(exc: Any) -> str:
    return str(json.loads(exc.body)["reason"])


def raw(
    server: ApiServer, method: str, path: str, body: Any = None, ctype: str = "application/json"
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method)
    request.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_discovery_answers_like_a_real_server(api_client: Any) -> None:
    assert kubernetes.client.VersionApi(api_client).get_code().major == "1"
    groups = kubernetes.client.ApisApi(api_client).get_api_versions().groups
    assert {"apiextensions.k8s.io", "coordination.k8s.io"} <= {g.name for g in groups}
    pods = [
        r
        for r in kubernetes.client.CoreV1Api(api_client).get_api_resources().resources
        if r.name == "pods"
    ]
    assert pods[0].namespaced and "watch" in pods[0].verbs and pods[0].short_names == ["po"]


def test_create_sets_server_metadata_and_get_returns_it(core: Any) -> None:
    created = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "cm"}, "data": {"a": "1"}}
    )
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp and int(meta.resource_version) > 0
    got = core.read_namespaced_config_map("cm", "default")
    assert got.data == {"a": "1"} and got.metadata.resource_version == meta.resource_version


def test_generate_name_creates_unique_names(core: Any) -> None:
    body = {"metadata": {"generateName": "job-"}}
    names = {core.create_namespaced_config_map("default", body).metadata.name for _ in range(5)}
    assert len(names) == 5 and all(n.startswith("job-") and len(n) == 9 for n in names)


def test_create_of_existing_name_is_already_exists(core: Any) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    assert err.value.status == 409 and reason(err.value) == "AlreadyExists"


def test_update_with_stale_resource_version_conflicts(core: Any) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    cm.data = {"x": "1"}
    core.replace_namespaced_config_map("cm", "default", cm)
    cm.data = {"x": "2"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cm", "default", cm)
    assert err.value.status == 409 and reason(err.value) == "Conflict"
    cm.metadata.resource_version = None
    assert core.replace_namespaced_config_map("cm", "default", cm).data == {"x": "2"}


def test_noop_update_does_not_bump_resource_version(core: Any) -> None:
    cm = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "cm"}, "data": {"a": "1"}}
    )
    again = core.replace_namespaced_config_map("cm", "default", cm)
    assert again.metadata.resource_version == cm.metadata.resource_version


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {
                "metadata": {"name": "Bad_Name"},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
            "metadata.name",
        ),
        ({"metadata": {"name": "no-containers"}, "spec": {"containers": []}}, "spec.containers"),
        (
            {"metadata": {"name": "no-image"}, "spec": {"containers": [{"name": "c"}]}},
            "spec.containers[0].image",
        ),
        ({"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "metadata.name"),
    ],
    ids=["invalid name", "no containers", "container without image", "missing name"],
)
def test_invalid_pods_are_rejected_with_422(core: Any, body: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", body)
    assert err.value.status == 422 and reason(err.value) == "Invalid"
    assert field in [c["field"] for c in json.loads(err.value.body)["details"]["causes"]]


def test_create_in_missing_namespace_is_not_found(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("nope", {"metadata": {"name": "cm"}})
    assert err.value.status == 404 and reason(err.value) == "NotFound"


def test_error_statuses_for_bad_requests(server: ApiServer) -> None:
    assert raw(server, "POST", "/api/v1/namespaces/default/configmaps", b"{not json")[0] == 400
    assert (
        raw(server, "PUT", "/api/v1/namespaces/default/configmaps", {})[1]["reason"]
        == "MethodNotAllowed"
    )
    code, body = raw(server, "GET", "/api/v1/namespaces/default/configmaps/missing")
    assert (code, body["kind"], body["reason"]) == (404, "Status", "NotFound")


def test_patch_types(core: Any, server: ApiServer) -> None:
    pod = make_pod("p", containers=("a", "b"))
    pod["spec"]["containers"][0]["env"] = [{"name": "X", "value": "1"}]
    core.create_namespaced_pod("default", pod)
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"m": "1"}}})  # strategic
    path = "/api/v1/namespaces/default/pods/p"
    raw(
        server,
        "PATCH",
        path,
        {"metadata": {"annotations": {"k": "v"}}},
        "application/merge-patch+json",
    )
    raw(
        server,
        "PATCH",
        path,
        [{"op": "add", "path": "/metadata/labels/j", "value": "2"}],
        "application/json-patch+json",
    )
    strategic = {"spec": {"containers": [{"name": "a", "image": "busybox:2"}]}}
    assert raw(server, "PATCH", path, strategic, "application/strategic-merge-patch+json")[0] == 200
    got = core.read_namespaced_pod("p", "default")
    assert got.metadata.labels == {"m": "1", "j": "2"} and got.metadata.annotations == {"k": "v"}
    assert [(c.name, c.image) for c in got.spec.containers] == [
        ("a", "busybox:2"),
        ("b", "busybox"),
    ]
    failed = raw(
        server,
        "PATCH",
        path,
        [{"op": "test", "path": "/metadata/name", "value": "q"}],
        "application/json-patch+json",
    )
    assert failed[0] == 422


def test_server_side_apply_creates_then_merges(server: ApiServer, core: Any) -> None:
    path = "/api/v1/namespaces/default/configmaps/applied?fieldManager=test"
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: '1'\n"
    assert raw(server, "PATCH", path, body, "application/apply-patch+yaml")[0] == 201
    raw(server, "PATCH", path, {"data": {"b": "2"}}, "application/apply-patch+yaml")
    assert core.read_namespaced_config_map("applied", "default").data == {"a": "1", "b": "2"}


def test_pod_spec_is_immutable_except_image(core: Any) -> None:
    core.create_namespaced_pod("default", make_pod("p"))
    core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "main", "image": "other"}]}}
    )
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p", "default", {"spec": {"restartPolicy": "Always"}})
    assert err.value.status == 422


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", {"p1", "p2"}),
        ("app==a,tier=x", {"p1"}),
        ("app!=a", {"p3", "p4"}),
        ("tier in (x,y)", {"p1", "p3"}),
        ("tier notin (x)", {"p2", "p3", "p4"}),
        ("tier", {"p1", "p3"}),
        ("!tier", {"p2", "p4"}),
    ],
    ids=[
        "equality",
        "two terms",
        "inequality includes unlabelled",
        "in",
        "notin includes absent",
        "exists",
        "does not exist",
    ],
)
def test_label_selectors(core: Any, selector: str, expected: set[str]) -> None:
    for name, labels in {
        "p1": {"app": "a", "tier": "x"},
        "p2": {"app": "a"},
        "p3": {"app": "b", "tier": "y"},
        "p4": {},
    }.items():
        core.create_namespaced_pod("default", make_pod(name, labels=labels))
    got = core.list_namespaced_pod("default", label_selector=selector)
    assert {p.metadata.name for p in got.items} == expected


def test_field_selectors(core: Any, server: ApiServer) -> None:
    for name in ("a", "b"):
        core.create_namespaced_pod("default", make_pod(name))
    server.store.mutate(
        server.store.resource("pods"),
        "default",
        "b",
        lambda p: {**p, "status": {"phase": "Running"}},
        "status",
    )
    assert [
        p.metadata.name
        for p in core.list_namespaced_pod("default", field_selector="metadata.name=a").items
    ] == ["a"]
    assert [
        p.metadata.name
        for p in core.list_pod_for_all_namespaces(field_selector="status.phase!=Pending").items
    ] == ["b"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", field_selector="spec.containers=x")
    assert err.value.status == 400


def test_pagination_with_limit_and_continue(core: Any) -> None:
    for i in range(7):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
    first = core.list_namespaced_config_map("default", limit=3)
    names, token, rv = (
        [c.metadata.name for c in first.items],
        first.metadata._continue,
        first.metadata.resource_version,
    )
    assert first.metadata.remaining_item_count == 4
    while token:
        page = core.list_namespaced_config_map("default", limit=3, _continue=token)
        assert page.metadata.resource_version == rv
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
    assert names == [f"cm-{i}" for i in range(7)]


def test_list_across_namespaces(core: Any) -> None:
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    core.create_namespaced_config_map("other", {"metadata": {"name": "b"}})
    got = core.list_config_map_for_all_namespaces()
    assert {(c.metadata.namespace, c.metadata.name) for c in got.items} == {
        ("default", "a"),
        ("other", "b"),
    }


def test_delete_collection_by_label(core: Any) -> None:
    for name, labels in {"a": {"job": "x"}, "b": {"job": "x"}, "c": {"job": "y"}}.items():
        core.create_namespaced_pod("default", make_pod(name, labels=labels))
    core.delete_collection_namespaced_pod("default", label_selector="job=x")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["c"]


def test_delete_preconditions(core: Any) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map("cm", "default", body={"preconditions": {"uid": "wrong"}})
    assert err.value.status == 409
    core.delete_namespaced_config_map(
        "cm", "default", body={"preconditions": {"uid": cm.metadata.uid}}
    )
    assert core.list_namespaced_config_map("default").items == []


def test_pod_status_subresource_separates_spec_and_status(core: Any) -> None:
    core.create_namespaced_pod("default", make_pod("p"))
    core.patch_namespaced_pod(
        "p", "default", {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}}
    )
    pod = core.read_namespaced_pod("p", "default")
    assert pod.status.phase == "Pending" and pod.metadata.labels == {"a": "b"}
    core.patch_namespaced_pod_status(
        "p", "default", {"status": {"phase": "Running"}, "metadata": {"labels": {"c": "d"}}}
    )
    pod = core.read_namespaced_pod("p", "default")
    assert pod.status.phase == "Running" and pod.metadata.labels == {"a": "b"}


def test_leases_and_events_are_served(api_client: Any, core: Any) -> None:
    coordination = kubernetes.client.CoordinationV1Api(api_client)
    lease = coordination.create_namespaced_lease(
        "kube-system",
        {
            "metadata": {"name": "leader"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )
    lease.spec.holder_identity = "b"
    assert (
        coordination.replace_namespaced_lease("leader", "kube-system", lease).spec.holder_identity
        == "b"
    )
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "Started",
            "message": "m",
        },
    )
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e2"},
            "involvedObject": {"kind": "Pod", "name": "q"},
            "reason": "Started",
            "message": "m",
        },
    )
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=q")
    assert [e.metadata.name for e in events.items] == ["e2"]


def test_services_get_cluster_ip_unless_headless(core: Any) -> None:
    svc = core.create_namespaced_service(
        "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}
    )
    headless = core.create_namespaced_service(
        "default",
        {"metadata": {"name": "h"}, "spec": {"clusterIP": "None", "selector": {"a": "b"}}},
    )
    assert svc.spec.cluster_ip.startswith("10.96.") and headless.spec.cluster_ip == "None"
    assert svc.spec.ports[0].target_port == 80


def test_strategic_merge_merges_lists_by_their_keys() -> None:
    current = {
        "spec": {
            "containers": [
                {"name": "a", "env": [{"name": "X", "value": "1"}], "ports": [{"containerPort": 1}]}
            ]
        },
        "metadata": {"finalizers": ["f1"]},
    }
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "env": [{"name": "Y", "value": "2"}, {"name": "X", "$patch": "delete"}],
                    "ports": [{"containerPort": 2}],
                },
                {"name": "b"},
            ]
        },
        "metadata": {"finalizers": ["f2"], "$deleteFromPrimitiveList/finalizers": ["f1"]},
    }
    merged = strategic_merge_patch(current, patch)
    container = merged["spec"]["containers"][0]
    assert [c["name"] for c in merged["spec"]["containers"]] == ["a", "b"]
    assert container["env"] == [{"name": "Y", "value": "2"}]
    assert [p["containerPort"] for p in container["ports"]] == [1, 2]
    assert merged["metadata"]["finalizers"] == ["f2"]


def test_continue_token_older_than_history_is_410(server: ApiServer, core: Any) -> None:
    for i in range(3):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
    token = core.list_namespaced_config_map("default", limit=1).metadata._continue
    server.faults.expire_history()
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", limit=1, _continue=token)
    assert err.value.status == 410 and reason(err.value) == "Expired"


def test_importing_the_server_does_not_import_kubernetes() -> None:
    code = "import sys, trainop_core.testing; sys.exit('kubernetes' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, check=False)
    assert done.returncode == 0
