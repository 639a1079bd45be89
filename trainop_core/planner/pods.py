"""The objects a replica needs: its Pod and its headless Service, exactly as upstream names them."""

from __future__ import annotations

import copy
import marshal
from typing import Any

from trainop_core import gang
from trainop_core.api.podtemplate import default_container
from trainop_core.api.types import RestartPolicy
from trainop_core.planner.addressing import replica_name
from trainop_core.planner.context import WARNING, Round

LABEL_PREFIX = "training.kubeflow.org/"
OPERATOR_NAME = LABEL_PREFIX + "operator-name"
JOB_NAME = LABEL_PREFIX + "job-name"
REPLICA_TYPE = LABEL_PREFIX + "replica-type"
REPLICA_INDEX = LABEL_PREFIX + "replica-index"
JOB_ROLE = LABEL_PREFIX + "job-role"


def job_labels(r: Round) -> dict[str, str]:
    """What selects every object of one job."""
    return {OPERATOR_NAME: r.kind.controller_name, JOB_NAME: r.job.name}


def replica_labels(r: Round, rtype: str, index: int) -> dict[str, str]:
    return {**job_labels(r), REPLICA_TYPE: rtype.lower(), REPLICA_INDEX: str(index)}


def replica_selector(r: Round, rtype: str) -> str:
    """The scale subresource's selector string (label keys sorted, as Kubernetes prints them)."""
    labels = {**job_labels(r), REPLICA_TYPE: rtype.lower()}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def owner_reference(r: Round) -> dict[str, Any]:
    """The controller reference every object of the job carries (deleting the job cascades)."""
    return dict(r.owner)


def _metadata(r: Round, template_meta: dict[str, Any], name: str, labels: dict[str, str]) -> Any:
    metadata = template_meta
    metadata["name"] = name
    metadata["namespace"] = r.job.namespace
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    metadata["ownerReferences"] = [dict(r.owner)]
    return metadata


def _inject_env(r: Round, rtype: str, index: int, pod_spec: dict[str, Any]) -> None:
    env = r.kind.env(r.cluster, rtype, index)
    if not env:
        return
    names = {e["name"] for e in env}
    containers = pod_spec.get("containers") or []
    if not r.kind.env_in_all_containers:
        containers = [c for c in containers if c.get("name") == r.kind.default_container]
    for container in containers:
        # The contract's value replaces a user-set one (upstream appends, and the last one wins).
        kept = [e for e in container.get("env") or [] if e.get("name") not in names]
        container["env"] = kept + [dict(e) for e in env]


def _set_restart_policy(r: Round, rtype: str, pod_spec: dict[str, Any]) -> None:
    policy = r.restart_policy(rtype)
    # ExitCode is the operator's own policy: the kubelet must never restart such a pod itself.
    wanted = RestartPolicy.NEVER if policy == RestartPolicy.EXIT_CODE else policy
    if pod_spec.get("restartPolicy") and (rtype, "restart") not in r.warned:
        r.warned.add((rtype, "restart"))
        message = (
            "Restart policy in pod template will be overwritten by restart policy in replica spec"
        )
        r.event(WARNING, "SetPodTemplateRestartPolicy", message)
    pod_spec["restartPolicy"] = wanted.value


def _idle_command(r: Round, rtype: str, pod_spec: dict[str, Any]) -> None:
    """`Kind.idle_commands`: a hosting replica's main container runs this if it names none."""
    idle = dict(r.kind.idle_commands).get(rtype)
    main = default_container({"spec": pod_spec}, r.kind.default_container)
    if idle and main is not None and not main.get("command"):
        main["command"], main["args"] = [idle[0]], list(idle[1:])


def copy_template(template: dict[str, Any]) -> dict[str, Any]:
    """A private copy of a pod template.

    Templates are JSON-shaped, and marshal copies those an order of magnitude faster than
    deepcopy, which matters when one plan builds thousands of pods. YAML timestamps and other
    exotic values fall back to deepcopy.
    """
    try:
        copied: dict[str, Any] = marshal.loads(marshal.dumps(template))
    except ValueError:
        copied = copy.deepcopy(template)
    return copied


def build_pod(r: Round, rtype: str, index: int) -> dict[str, Any]:
    """The Pod for replica `index` of `rtype`, with every decoration applied in upstream's order."""
    template = copy_template(r.job.spec.replica_specs[rtype].template)
    labels = replica_labels(r, rtype, index)
    if r.kind.is_master_role(r.replicas, rtype, index):
        labels[JOB_ROLE] = "master"
    name = replica_name(r.job.name, rtype, index)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(r, template.get("metadata") or {}, name, labels),
        "spec": template.get("spec") or {},
    }
    _set_restart_policy(r, rtype, pod["spec"])
    _idle_command(r, rtype, pod["spec"])
    _inject_env(r, rtype, index, pod["spec"])
    r.kind.decorate_pod(r.cluster, rtype, index, pod)
    if r.options.gang_scheduler_name:
        for event in gang.decorate_pod(r.job, rtype, pod, r.options.gang_scheduler_name):
            if (rtype, event.reason) not in r.warned:
                r.warned.add((rtype, event.reason))
                r.plan.events.append(event)
    for decorator in r.decorators:
        decorator(r.job, rtype, index, pod)
    return pod


def build_service(r: Round, rtype: str, index: int) -> dict[str, Any]:
    """A headless Service of the pod's name exposing every port of the default container."""
    labels = replica_labels(r, rtype, index)
    template = r.job.spec.replica_specs[rtype].template
    container = default_container(template, r.kind.default_container) or {}
    ports = [
        {"name": p["name"], "port": p["containerPort"]}
        for p in container.get("ports") or []
        if isinstance(p, dict) and "containerPort" in p and p.get("name")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(r, {}, replica_name(r.job.name, rtype, index), labels),
        "spec": {"clusterIP": "None", "selector": dict(labels), "ports": ports},
    }


def build_objects(r: Round, running: dict[str, list[int]]) -> list[dict[str, Any]]:
    """The kind's other objects (`Kind.objects`), in the job's namespace and owned by it."""
    objects = r.kind.objects(r.cluster, running)
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = r.job.namespace
        meta["ownerReferences"] = [dict(r.owner)]
    return objects
