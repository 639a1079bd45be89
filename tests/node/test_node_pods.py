"""Pods on process nodes: what a kubelet does with a pod, observed through the API only."""

from __future__ import annotations

import base64
import time

import pytest
from nodekit import NodeCluster, pod

from trainop_core.node import cgroups

PRINT_ENV = "import os; print(*(k + '=' + str(os.environ.get(k)) for k in {names!r}), sep='\\n')"


def env_lines(node_cluster: NodeCluster, ns: str, name: str) -> dict[str, str]:
    node_cluster.wait_phase(ns, name, ("Succeeded",))
    text = node_cluster.log(ns, name)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_a_pod_is_scheduled_runs_its_command_and_succeeds_with_exit_code_0(
    node_cluster: NodeCluster, ns: str
) -> None:
    node_cluster.create(ns, pod("hello").python("print('hello from a pod')").build())
    done = node_cluster.wait_phase(ns, "hello", ("Succeeded",))
    assert done["spec"]["nodeName"] in node_cluster.nodes.names
    state = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (0, "Completed")
    assert done["status"]["podIP"]
    assert node_cluster.log(ns, "hello") == "hello from a pod"


def test_env_has_the_downward_api_resource_fields_and_expanded_variables(
    node_cluster: NodeCluster, ns: str
) -> None:
    names = ["NAME", "NAMESPACE", "NODE", "IP", "LABEL", "CPU", "MEM", "GREETING"]
    env = [
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu",
                                                           "divisor": "1m"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory",
                                                           "divisor": "1Mi"}}},
        {"name": "GREETING", "value": "hi $(NAME) in $(NAMESPACE), $$(NAME) kept"},
    ]  # fmt: skip
    resources = {"limits": {"cpu": "250m", "memory": "64Mi"}, "requests": {"memory": "32Mi"}}
    built = pod("env").python(PRINT_ENV.format(names=names), env=env, resources=resources)
    built.labels["team"] = "ml"
    node_cluster.create(ns, built.build())
    seen = env_lines(node_cluster, ns, "env")
    placed = node_cluster.get(ns, "env")
    assert seen == {
        "NAME": "env",
        "NAMESPACE": ns,
        "NODE": placed["spec"]["nodeName"],
        "IP": placed["status"]["podIP"],
        "LABEL": "ml",
        "CPU": "250",
        "MEM": "32",
        "GREETING": f"hi env in {ns}, $(NAME) kept",
    }


def test_configmap_and_secret_reach_env_and_volumes(node_cluster: NodeCluster, ns: str) -> None:
    rest = node_cluster.cp.rest
    rest.create(
        f"/api/v1/namespaces/{ns}/configmaps",
        {"metadata": {"name": "settings"}, "data": {"MODE": "fast", "conf.ini": "[a]"}},
    )
    secret = base64.b64encode(b"s3cret").decode()
    rest.create(f"/api/v1/namespaces/{ns}/secrets",
                {"metadata": {"name": "creds"}, "data": {"token": secret}})  # fmt: skip
    source = (
        "import os; print('MODE=' + os.environ['CFG_MODE'])\n"
        "print('TOKEN=' + os.environ['TOKEN'])\n"
        "print('FILE=' + open('/etc/settings/conf.ini').read())\n"
        "print('SECRETFILE=' + open('/etc/creds/token').read())"
    )
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    mounts = [{"name": "settings", "mountPath": "/etc/settings"},
              {"name": "creds", "mountPath": "/etc/creds", "readOnly": True}]  # fmt: skip
    built = (
        pod("cfg")
        .python(source, env=env, envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
                volumeMounts=mounts)
        .volume("settings", configMap={"name": "settings"})
        .volume("creds", secret={"secretName": "creds"})
    )  # fmt: skip
    node_cluster.create(ns, built.build())
    seen = env_lines(node_cluster, ns, "cfg")
    assert seen == {"MODE": "fast", "TOKEN": "s3cret", "FILE": "[a]", "SECRETFILE": "s3cret"}


def test_a_missing_configmap_keeps_the_container_waiting_with_the_kubelets_reason(
    node_cluster: NodeCluster, ns: str
) -> None:
    env_from = [{"configMapRef": {"name": "absent"}}]
    node_cluster.create(ns, pod("waits").python("print(1)", envFrom=env_from).build())
    waiting = node_cluster.wait_status(ns, "waits", lambda s: "waiting" in s["state"]
                                       and s["state"]["waiting"].get("reason")
                                       == "CreateContainerConfigError")  # fmt: skip
    message = waiting["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert "absent" in message
    assert waiting["status"]["phase"] == "Pending"


def test_a_container_without_command_waits_naming_its_image(
    node_cluster: NodeCluster, ns: str
) -> None:
    built = pod("noimage").build()
    built["spec"]["containers"] = [{"name": "main", "image": "registry.example/trainer:v3"}]
    node_cluster.create(ns, built)
    found = node_cluster.wait_status(
        ns, "noimage", lambda s: s["state"].get("waiting", {}).get("reason") == "ErrImageNeverPull"
    )
    message = found["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert "registry.example/trainer:v3" in message


def test_init_containers_run_in_order_and_share_an_empty_dir(
    node_cluster: NodeCluster, ns: str
) -> None:
    mount = [{"name": "work", "mountPath": "/work-shared"}]
    append = "open('/work-shared/order', 'a').write('{}\\n')"
    built = (
        pod("inits")
        .init(append.format("first"), name="first", volumeMounts=mount)
        .init(append.format("second"), name="second", volumeMounts=mount)
        .python("print(open('/work-shared/order').read().split())", volumeMounts=mount)
        .volume("work", emptyDir={})
    )
    node_cluster.create(ns, built.build())
    done = node_cluster.wait_phase(ns, "inits", ("Succeeded",))
    assert node_cluster.log(ns, "inits") == "['first', 'second']"
    inits = done["status"]["initContainerStatuses"]
    assert [s["state"]["terminated"]["reason"] for s in inits] == ["Completed", "Completed"]


def test_on_failure_restarts_in_place_with_back_off_and_counts_restarts(
    node_cluster: NodeCluster, ns: str
) -> None:
    source = (
        "import os, sys; path = '/flaky/count'\n"
        "n = int(open(path).read()) if os.path.exists(path) else 0\n"
        "open(path, 'w').write(str(n + 1)); print('attempt', n); sys.exit(0 if n >= 2 else 3)"
    )
    built = (
        pod("flaky").policy("OnFailure")
        .python(source, volumeMounts=[{"name": "state", "mountPath": "/flaky"}])
        .volume("state", emptyDir={})
    )  # fmt: skip
    node_cluster.create(ns, built.build())
    done = node_cluster.wait_phase(ns, "flaky", ("Succeeded",))
    status = done["status"]["containerStatuses"][0]
    assert status["restartCount"] == 2
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert node_cluster.log(ns, "flaky") == "attempt 2"
    assert node_cluster.log(ns, "flaky", previous=True) == "attempt 1"


def test_a_container_killed_by_sigkill_reports_exit_code_137(
    node_cluster: NodeCluster, ns: str
) -> None:
    source = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    node_cluster.create(ns, pod("killed").python(source).build())
    done = node_cluster.wait_phase(ns, "killed", ("Failed",))
    state = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (137, "Error")


def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period(
    node_cluster: NodeCluster, ns: str
) -> None:
    source = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: print('got SIGTERM, ignoring it', flush=True))\n"
        "print('running', flush=True)\n"
        "while True: time.sleep(0.1)"
    )
    node_cluster.create(ns, pod("stubborn").python(source).spec(
        terminationGracePeriodSeconds=2).build())  # fmt: skip
    node_cluster.wait_status(ns, "stubborn", lambda s: "running" in s["state"])
    wait_log = lambda: "running" in node_cluster.log(ns, "stubborn")  # noqa: E731
    from trainop_core.testing.builders import wait_for

    wait_for(wait_log, 30, interval=0.1)
    started = time.monotonic()
    node_cluster.cp.rest.delete(f"/api/v1/namespaces/{ns}/pods/stubborn")
    wait_for(lambda: "SIGTERM" in node_cluster.log(ns, "stubborn"), 30, interval=0.1)
    node_cluster.wait_gone(ns, "stubborn")
    assert time.monotonic() - started >= 2.0  # it ignored SIGTERM: only SIGKILL ended it


@pytest.mark.skipif(not cgroups.usable(), reason=cgroups.why_not())
def test_a_container_over_its_memory_limit_is_oom_killed(
    node_cluster: NodeCluster, ns: str
) -> None:
    source = "blocks = []\nwhile True: blocks.append(bytearray(8 << 20))"
    resources = {"limits": {"memory": "64Mi"}}
    node_cluster.create(ns, pod("hungry").python(source, resources=resources).build())
    done = node_cluster.wait_phase(ns, "hungry", ("Failed",))
    state = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (137, "OOMKilled")
