"""CRD-driven resources, generation, finalizers, garbage collection and namespace deletion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainop_core.testing import ApiServer
from trainop_core.testing.builders import make_pod, owner_ref, wait_for

kubernetes = pytest.importorskip("kubernetes")
yaml = pytest.importorskip("yaml")


def load_fixture(name: str) -> dict[str, Any]:
    path = Path(__file__).parent / "fixtures" / name
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


ApiException = kubernetes.client.exceptions.ApiException
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


def create_job(
    custom: Any, name: str = "mnist", finalizers: list[str] | None = None
) -> dict[str, Any]:
    body = load_fixture("pytorchjob.yaml")
    body["metadata"]["name"] = name
    if finalizers:
        body["metadata"]["finalizers"] = finalizers
    return custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)  # type: ignore[no-any-return]


def get_job(custom: Any, name: str = "mnist") -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)  # type: ignore[no-any-return]


def job_exists(server: ApiServer, name: str = "mnist") -> bool:
    return server.store.find(server.store.resource(PLURAL, GROUP), "default", name) is not None


def test_custom_resources_are_served_only_while_their_crd_exists(
    api_client: Any, custom: Any
) -> None:
    with pytest.raises(ApiException) as err:
        create_job(custom)
    assert err.value.status == 404
    ext = kubernetes.client.ApiextensionsV1Api(api_client)
    ext.create_custom_resource_definition(
        load_fixture("pytorchjob-crd.yaml"), _preload_content=False
    )
    job = create_job(custom)
    assert job["apiVersion"] == "kubeflow.org/v1" and job["metadata"]["generation"] == 1
    resources = kubernetes.client.CustomObjectsApi(api_client).get_api_resources(GROUP, VERSION)
    assert {r.name for r in resources.resources} == {
        "pytorchjobs",
        "pytorchjobs/status",
        "pytorchjobs/scale",
    }
    ext.delete_custom_resource_definition("pytorchjobs.kubeflow.org")
    with pytest.raises(ApiException) as err:
        get_job(custom)
    assert err.value.status == 404


@pytest.mark.usefixtures("crd")
def test_generation_bumps_on_spec_changes_only(custom: Any) -> None:
    create_job(custom)
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "mnist", {"metadata": {"labels": {"x": "y"}}}
    )
    assert get_job(custom)["metadata"]["generation"] == 1
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "mnist",
        {"status": {"conditions": [{"type": "Running", "status": "True"}]}},
    )
    assert get_job(custom)["metadata"]["generation"] == 1
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "mnist", {"spec": {"runPolicy": {"suspend": True}}}
    )
    job = get_job(custom)
    assert (
        job["metadata"]["generation"] == 2 and job["status"]["conditions"][0]["type"] == "Running"
    )


@pytest.mark.usefixtures("crd")
def test_status_subresource_of_custom_resources(custom: Any) -> None:
    job = create_job(custom)
    job["status"] = {"phase": "ignored"}
    job["spec"]["extra"] = True
    updated = custom.replace_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "mnist", job
    )
    assert "status" not in updated and updated["spec"]["extra"] is True
    updated["status"] = {"phase": "kept"}
    updated["spec"]["extra"] = False
    after = custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "mnist", updated
    )
    assert after["status"] == {"phase": "kept"} and after["spec"]["extra"] is True


@pytest.mark.usefixtures("crd")
def test_scale_subresource_uses_the_declared_paths(custom: Any) -> None:
    create_job(custom)
    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, "default", PLURAL, "mnist")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
    custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, "default", PLURAL, "mnist", {"spec": {"replicas": 4}}
    )
    assert get_job(custom)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4


@pytest.mark.usefixtures("crd")
def test_strategic_merge_patch_is_unsupported_for_custom_resources(
    server: ApiServer, api_client: Any, custom: Any
) -> None:
    create_job(custom)
    with pytest.raises(ApiException) as err:
        api_client.call_api(
            f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/mnist",
            "PATCH",
            header_params={"Content-Type": "application/strategic-merge-patch+json"},
            body={"spec": {}},
            _preload_content=False,
        )
    assert err.value.status == 415


@pytest.mark.usefixtures("crd")
def test_finalizers_delay_deletion_until_removed(server: ApiServer, custom: Any) -> None:
    create_job(custom, finalizers=["example.com/cleanup"])
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "mnist")
    job = get_job(custom)
    assert job["metadata"]["deletionTimestamp"] and job["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "mnist",
            {"metadata": {"finalizers": ["example.com/cleanup", "new"]}},
        )
    assert err.value.status == 422
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "mnist", {"metadata": {"finalizers": None}}
    )
    assert not job_exists(server)


def job_with_pods(server: ApiServer, custom: Any, core: Any, block: bool = True) -> dict[str, Any]:
    job = create_job(custom)
    for i in range(2):
        core.create_namespaced_pod(
            "default", make_pod(f"mnist-worker-{i}", owner=owner_ref(job, block=block))
        )
    return job


def pod_names(core: Any) -> list[str]:
    return [p.metadata.name for p in core.list_namespaced_pod("default").items]


@pytest.mark.usefixtures("crd")
def test_background_deletion_collects_dependents_after_the_owner(
    server: ApiServer, custom: Any, core: Any
) -> None:
    job_with_pods(server, custom, core)
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "mnist")
    assert not job_exists(server)
    wait_for(lambda: pod_names(core) == [])


@pytest.mark.usefixtures("crd")
def test_foreground_deletion_removes_the_owner_after_blocking_dependents(
    server: ApiServer, custom: Any, core: Any, events_until_bookmark: Any
) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    job_with_pods(server, custom, core)
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "mnist", propagation_policy="Foreground"
    )
    wait_for(lambda: not job_exists(server))
    assert pod_names(core) == []
    lines = events_until_bookmark(
        custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, resource_version=rv
    )
    marked = next(e for e in lines if e["type"] == "MODIFIED")
    assert "foregroundDeletion" in marked["object"]["metadata"]["finalizers"]
    pods_gone = [
        int(e["object"].metadata.resource_version)
        for e in events_until_bookmark(core.list_namespaced_pod, "default", resource_version=rv)
        if e["type"] == "DELETED"
    ]
    job_gone = next(
        int(e["object"]["metadata"]["resourceVersion"]) for e in lines if e["type"] == "DELETED"
    )
    assert len(pods_gone) == 2 and max(pods_gone) < job_gone


@pytest.mark.usefixtures("crd")
def test_orphan_deletion_strips_owner_references(server: ApiServer, custom: Any, core: Any) -> None:
    job_with_pods(server, custom, core)
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "mnist", propagation_policy="Orphan"
    )
    wait_for(lambda: not job_exists(server))
    pods = core.list_namespaced_pod("default").items
    assert len(pods) == 2 and all(p.metadata.owner_references is None for p in pods)


def test_dependent_of_a_missing_owner_is_collected(core: Any) -> None:
    ghost = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ghost", "uid": "no-such-uid"},
    }
    core.create_namespaced_pod("default", make_pod("orphaned", owner=owner_ref(ghost)))
    wait_for(lambda: pod_names(core) == [])


def test_deleting_a_namespace_deletes_its_contents(core: Any) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_pod("team", make_pod("p"))
    core.delete_namespace("team")
    wait_for(lambda: "team" not in [n.metadata.name for n in core.list_namespace().items])
    assert core.list_pod_for_all_namespaces().items == []


def test_no_new_content_in_a_terminating_namespace(core: Any) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_config_map(
        "team", {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespace("team")
    assert core.read_namespace("team").status.phase == "Terminating"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("team", {"metadata": {"name": "late"}})
    assert err.value.status == 403
    core.patch_namespaced_config_map("held", "team", {"metadata": {"finalizers": None}})
    wait_for(lambda: "team" not in [n.metadata.name for n in core.list_namespace().items])


def test_every_served_version_of_a_crd_shares_storage(api_client: Any, custom: Any) -> None:
    crd = load_fixture("pytorchjob-crd.yaml")
    beta = {**crd["spec"]["versions"][0], "name": "v1beta1", "storage": False}
    crd["spec"]["versions"].append(beta)
    ext = kubernetes.client.ApiextensionsV1Api(api_client)
    ext.create_custom_resource_definition(crd, _preload_content=False)
    job = load_fixture("pytorchjob.yaml")
    job["apiVersion"] = "kubeflow.org/v1beta1"
    custom.create_namespaced_custom_object(GROUP, "v1beta1", "default", PLURAL, job)
    assert get_job(custom)["apiVersion"] == "kubeflow.org/v1"
    old = custom.get_namespaced_custom_object(GROUP, "v1beta1", "default", PLURAL, "mnist")
    assert old["apiVersion"] == "kubeflow.org/v1beta1"
