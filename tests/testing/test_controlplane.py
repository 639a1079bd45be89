"""The real control plane (trainop_core.testing.controlplane): start, stop, identities, kubectl."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from k8s import start_control_plane

from trainop_core.kinds.table import KindRegistry
from trainop_core.testing.binaries import BUILD_COMMAND, ETCD_VERSION
from trainop_core.testing.builders import wait_for
from trainop_core.testing.controlplane import ControlPlane, ControlPlaneError
from trainop_core.testing.rest import RestError


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    return subprocess.run(
        ["kubectl", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_test_infrastructure_imports_without_the_kubernetes_package() -> None:
    code = textwrap.dedent(
        """
        import sys
        class NoKubernetes:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "kubernetes":
                    raise ImportError("kubernetes is not installed here")
        sys.meta_path.insert(0, NoKubernetes())
        import trainop_core.testing.binaries, trainop_core.testing.cluster
        from trainop_core.testing import ControlPlane, Kubelet, Rule
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr


def test_stop_leaves_no_process_and_no_data() -> None:
    with ControlPlane(controller_manager=False) as cp:
        pids = [p.pid for p in cp.processes.values()]
        data_dir = cp.data_dir
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        assert cp.rest.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
    assert not any(alive(pid) for pid in pids)
    assert not data_dir.exists()


def test_a_killed_owner_leaves_no_process_and_no_data() -> None:
    """The watchdog cleans up after a test process that died by SIGKILL (no finally ran)."""
    script = textwrap.dedent(
        """
        import json, sys, time
        from trainop_core.testing.controlplane import ControlPlane
        cp = ControlPlane(controller_manager=False).start()
        pids = [p.pid for p in cp.processes.values()]
        print(json.dumps({"pids": pids, "data_dir": str(cp.data_dir)}), flush=True)
        time.sleep(600)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        started = json.loads(owner.stdout.readline())
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    wait_for(lambda: not any(alive(pid) for pid in started["pids"]), timeout=30)
    wait_for(lambda: not Path(started["data_dir"]).exists(), timeout=30)


def test_a_failed_start_quotes_the_logs_and_leaves_nothing() -> None:
    cp = ControlPlane(controller_manager=False, apiserver_flags=["--no-such-flag"])
    with pytest.raises(ControlPlaneError) as failed:
        cp.start()
    assert "kube-apiserver exited" in str(failed.value)
    assert "unknown flag: --no-such-flag" in str(failed.value)
    assert "kube-apiserver.log" in str(failed.value)
    assert not cp.processes and not cp.data_dir.exists()


def test_missing_binaries_fail_the_fixture_naming_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: KindRegistry
) -> None:
    monkeypatch.setenv("TRAINOP_CACHE_DIR", str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as failed:
        start_control_plane(registry)
    assert BUILD_COMMAND in str(failed.value)


def test_the_kubeconfig_is_private_and_kubectl_creates_a_namespace(
    control_plane: ControlPlane,
) -> None:
    """kubectl sends protobuf for built-in kinds; a real server takes it."""
    assert stat.S_IMODE(control_plane.kubeconfig.stat().st_mode) == 0o600
    name = f"kubectl-ns-{time.monotonic_ns() % 10**6}"
    created = kubectl(control_plane.kubeconfig, "create", "namespace", name)
    assert created.returncode == 0, created.stderr
    try:
        assert control_plane.rest.get(f"/api/v1/namespaces/{name}")["status"]["phase"] == "Active"
        assert kubectl(control_plane.kubeconfig, "version", "-o", "json").returncode == 0
    finally:
        deleted = kubectl(control_plane.kubeconfig, "delete", "namespace", name, "--wait")
    assert deleted.returncode == 0, deleted.stderr  # the namespace controller finished it


def test_rbac_is_enforced_for_a_service_account_token(
    control_plane: ControlPlane, k8s_namespace: str
) -> None:
    reader = f"{k8s_namespace}-pod-reader"
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    control_plane.rest.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": reader}, "rules": [rule]},
    )
    nobody = control_plane.rest_for(control_plane.service_account_token(k8s_namespace, "nobody"))
    token = control_plane.service_account_token(k8s_namespace, "reader", cluster_roles=[reader])
    pods = f"/api/v1/namespaces/{k8s_namespace}/pods"
    with pytest.raises(RestError) as denied:
        nobody.get(pods)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{k8s_namespace}:nobody" in denied.value.message
    assert control_plane.rest_for(token).get(pods)["items"] == []
    with pytest.raises(RestError) as read_only:
        control_plane.rest_for(token).create(pods, {"metadata": {"name": "x"}})
    assert read_only.value.status == 403
    kubeconfig = control_plane.kubeconfig_for(token)
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    can = kubectl(kubeconfig, "auth", "can-i", "list", "pods", "-n", k8s_namespace)
    cannot = kubectl(kubeconfig, "auth", "can-i", "create", "pods", "-n", k8s_namespace)
    assert (can.stdout.strip(), cannot.stdout.strip()) == ("yes", "no")


def test_etcd_is_the_pinned_3_6_release() -> None:
    with (
        ControlPlane(controller_manager=False) as cp,
        urllib.request.urlopen(f"{cp.etcd_url}/version", timeout=30) as answer,
    ):
        version = json.load(answer)

    assert f"v{version['etcdserver']}" == ETCD_VERSION
    assert version["etcdserver"].startswith("3.6.")


def test_compacting_etcd_makes_an_old_resource_version_gone() -> None:
    """Without the watch cache, lists and watches at a compacted resourceVersion reach etcd."""
    with ControlPlane(controller_manager=False, watch_cache=False) as cp:
        configmaps = "/api/v1/namespaces/default/configmaps"
        old = cp.rest.create(configmaps, {"metadata": {"name": "c"}, "data": {"n": "0"}})
        for n in range(1, 4):
            cp.rest.patch(f"{configmaps}/c", {"data": {"n": str(n)}})
        version = old["metadata"]["resourceVersion"]
        assert cp.compact_etcd() > int(version)
        with pytest.raises(RestError) as gone:
            cp.rest.get(configmaps, resourceVersion=version, resourceVersionMatch="Exact")
        assert gone.value.status == 410
        closer, events = cp.rest.stream(configmaps, {"resourceVersion": version}, 30)
        with closer:
            first = next(events)
        assert (first["type"], first["object"]["code"]) == ("ERROR", 410)


def test_service_accounts_need_the_controller_manager_that_makes_them() -> None:
    # ServiceAccount admission refuses every pod whose ServiceAccount is missing: without the
    # controller that makes `default` in each namespace no pod could be created at all.
    with pytest.raises(ValueError, match="service_accounts needs controller_manager"):
        ControlPlane(controller_manager=False, service_accounts=True)
