"""User pod decorators: applied after the kind's own, in order, passed in (no global registry)."""

from __future__ import annotations

from typing import Any

from tests.builders import make_job
from tests.core._kind_builders import REGISTRY, T0
from trainop_core.api.job import TrainingJob
from trainop_core.api.load import load_job
from trainop_core.decorators import NodeSelector, Sidecar, Tolerations, build_pod_decorators
from trainop_core.planner import KubernetesAddressing, Observed, Plan, plan


def first_plan(decorators: Any) -> Plan:
    job = load_job(make_job("PyTorchJob", "d").master().workers(1).build(), registry=REGISTRY)
    kind = REGISTRY.get(job.kind)
    addressing = KubernetesAddressing(job, kind)
    return plan(job, kind, Observed(), T0, addressing, decorators=decorators)


def pod(p: Plan, name: str) -> dict[str, Any]:
    return next(m for m in p.create_pods if m["metadata"]["name"] == name)


def test_node_selectors_tolerations_and_a_sidecar_are_added_to_every_pod() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    decorators = build_pod_decorators(
        entry_points=False,
        extra=[
            NodeSelector({"pool": "train"}),
            Tolerations([toleration]),
            Sidecar({"name": "log-shipper", "image": "busybox"}, replica_types=["Worker"]),
        ],
    )
    p = first_plan(decorators)
    for name in ("d-master-0", "d-worker-0"):
        spec = pod(p, name)["spec"]
        assert spec["nodeSelector"] == {"pool": "train"}
        assert spec["tolerations"] == [toleration]
    names = [c["name"] for c in pod(p, "d-worker-0")["spec"]["containers"]]
    assert names == ["pytorch", "log-shipper"]
    assert [c["name"] for c in pod(p, "d-master-0")["spec"]["containers"]] == ["pytorch"]


def test_decorators_run_after_the_kinds_own_and_see_its_env() -> None:
    seen: list[tuple[str, int, bool]] = []

    def record(job: TrainingJob, rtype: str, index: int, pod: dict[str, Any]) -> None:
        env = pod["spec"]["containers"][0]["env"]
        seen.append((rtype, index, any(e["name"] == "MASTER_ADDR" for e in env)))

    first_plan([record])
    assert sorted(seen) == [("Master", 0, True), ("Worker", 0, True)]


def test_without_decorators_pods_are_untouched() -> None:
    spec = pod(first_plan(()), "d-worker-0")["spec"]
    assert "nodeSelector" not in spec and "tolerations" not in spec
