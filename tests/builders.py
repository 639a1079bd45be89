"""Builders for test jobs: `make_job("PyTorchJob").master().workers(2).build()`.

`build()` returns the wire dict a user would write (camelCase, as in a YAML file); `job()`
returns the parsed `TrainingJob`. Every method returns the builder so calls chain. The builder
knows only the upstream kinds' wire names (kept here so tests do not depend on the kind
table); any other kind needs `replica_field=` and `container=`.
"""

from __future__ import annotations

import copy
from typing import Any

from trainop_core.api.job import API_VERSION, TrainingJob

DEFAULT_IMAGE = "docker.io/library/python:3.11-slim"

# kind -> (replica-spec field, default container name)
KIND_WIRE: dict[str, tuple[str, str]] = {
    "TFJob": ("tfReplicaSpecs", "tensorflow"),
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch"),
    "MXJob": ("mxReplicaSpecs", "mxnet"),
    "MXNetJob": ("mxReplicaSpecs", "mxnet"),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost"),
    "PaddleJob": ("paddleReplicaSpecs", "paddle"),
    "MPIJob": ("mpiReplicaSpecs", "mpi"),
}


class JobBuilder:
    """Accumulates a job dict; replica types keep the order they were added in."""

    def __init__(
        self,
        kind: str,
        name: str = "demo",
        *,
        replica_field: str | None = None,
        container: str | None = None,
        image: str = DEFAULT_IMAGE,
    ) -> None:
        field, default_container = KIND_WIRE.get(kind, (replica_field or "", container or ""))
        self.replica_field = replica_field or field
        self.container_name = container or default_container
        if not self.replica_field or not self.container_name:
            raise ValueError(f"unknown kind {kind!r}: pass replica_field= and container=")
        self.image = image
        self._data: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": name},
            "spec": {self.replica_field: {}},
        }

    # --- metadata -----------------------------------------------------------------------------
    def name(self, name: str | None) -> JobBuilder:
        """Set (or with None, remove) metadata.name."""
        if name is None:
            self._data["metadata"].pop("name", None)
        else:
            self._data["metadata"]["name"] = name
        return self

    def namespace(self, namespace: str) -> JobBuilder:
        self._data["metadata"]["namespace"] = namespace
        return self

    def labels(self, **labels: str) -> JobBuilder:
        self._data["metadata"].setdefault("labels", {}).update(labels)
        return self

    # --- replicas -----------------------------------------------------------------------------
    def replica(
        self,
        rtype: str,
        replicas: int | str | None = 1,  # a string only to test that it is rejected
        *,
        restart_policy: str | None = None,
        command: list[str] | None = None,
        image: str | None = None,
    ) -> JobBuilder:
        """Add (or replace) replica type `rtype` with one default-named container."""
        container: dict[str, Any] = {"name": self.container_name, "image": image or self.image}
        if command is not None:
            container["command"] = list(command)
        spec: dict[str, Any] = {"template": {"spec": {"containers": [container]}}}
        if replicas is not None:
            spec["replicas"] = replicas
        if restart_policy is not None:
            spec["restartPolicy"] = restart_policy
        self._replica_specs()[rtype] = spec
        return self

    def master(self, replicas: int | str | None = 1, **kw: Any) -> JobBuilder:
        return self.replica("Master", replicas, **kw)

    def chief(self, replicas: int | str | None = 1, **kw: Any) -> JobBuilder:
        return self.replica("Chief", replicas, **kw)

    def workers(self, replicas: int | str | None = 1, **kw: Any) -> JobBuilder:
        return self.replica("Worker", replicas, **kw)

    def ps(self, replicas: int | str | None = 1, **kw: Any) -> JobBuilder:
        return self.replica("PS", replicas, **kw)

    def evaluator(self, replicas: int | str | None = 1, **kw: Any) -> JobBuilder:
        return self.replica("Evaluator", replicas, **kw)

    def scheduler(self, replicas: int | str | None = 1, **kw: Any) -> JobBuilder:
        return self.replica("Scheduler", replicas, **kw)

    def servers(self, replicas: int | str | None = 1, **kw: Any) -> JobBuilder:
        return self.replica("Server", replicas, **kw)

    # --- containers ---------------------------------------------------------------------------
    def container(self, rtype: str, index: int = 0, **fields: Any) -> JobBuilder:
        """Merge wire fields into container `index` of `rtype` (None removes a field)."""
        target = self._containers(rtype)[index]
        for key, value in fields.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
        return self

    def add_container(self, rtype: str, **fields: Any) -> JobBuilder:
        self._containers(rtype).append(dict(fields))
        return self

    def command(self, command: list[str], rtype: str | None = None) -> JobBuilder:
        """Set the default container's command on `rtype` (or on every replica type)."""
        for name in [rtype] if rtype else list(self._replica_specs()):
            self.container(name, command=list(command))
        return self

    def env(self, rtype: str, **env: str) -> JobBuilder:
        entries = self._containers(rtype)[0].setdefault("env", [])
        entries.extend({"name": k, "value": v} for k, v in env.items())
        return self

    # --- spec ---------------------------------------------------------------------------------
    def run_policy(self, **fields: Any) -> JobBuilder:
        """Wire-named runPolicy fields, e.g. run_policy(cleanPodPolicy="All", backoffLimit=3)."""
        self._data["spec"].setdefault("runPolicy", {}).update(fields)
        return self

    def spec(self, **fields: Any) -> JobBuilder:
        """Wire-named top-level spec fields, e.g. spec(successPolicy="AllWorkers")."""
        self._data["spec"].update(fields)
        return self

    def set(self, path: str, value: Any) -> JobBuilder:
        """Set any dotted path (list indices as numbers), creating dicts on the way.

        For malformed input in tests: set("spec.runPolicy.backoffLimit", -1).
        """
        *parents, last = path.split(".")
        node: Any = self._data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return self

    def drop(self, path: str) -> JobBuilder:
        """Remove the key at a dotted path."""
        *parents, last = path.split(".")
        node: Any = self._data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]
        return self

    # --- results ------------------------------------------------------------------------------
    def build(self) -> dict[str, Any]:
        """The wire dict (a deep copy; the builder can keep going)."""
        return copy.deepcopy(self._data)

    def job(self) -> TrainingJob:
        """The parsed job (raises InvalidJobError like any load)."""
        from trainop_core.api.load import load_job

        return load_job(self.build())

    def yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.build(), sort_keys=False)

    # --- internals ----------------------------------------------------------------------------
    def _replica_specs(self) -> dict[str, Any]:
        specs: dict[str, Any] = self._data["spec"].setdefault(self.replica_field, {})
        return specs

    def _containers(self, rtype: str) -> list[dict[str, Any]]:
        template = self._replica_specs()[rtype].setdefault("template", {})
        containers: list[dict[str, Any]] = template.setdefault("spec", {}).setdefault(
            "containers", []
        )
        return containers


def make_job(kind: str, name: str = "demo", **kw: Any) -> JobBuilder:
    """Start a job of `kind` named `name` with no replicas yet."""
    return JobBuilder(kind, name, **kw)


def minimal_job(kind: str, name: str = "demo") -> JobBuilder:
    """The smallest valid job of each upstream kind (what its validation requires)."""
    builder = make_job(kind, name)
    if kind in ("PyTorchJob", "XGBoostJob"):
        return builder.master().workers(1)
    if kind in ("MXJob", "MXNetJob"):
        return builder.scheduler().servers(1).workers(1)
    return builder.workers(1)


def make_trainjob(
    name: str = "tj",
    runtime: str = "torch-distributed",
    namespace: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Kubeflow Trainer v2 TrainJob as a user writes it: `runtimeRef` names `runtime`,
    `spec` adds the rest in its wire spelling (``trainer={"numNodes": 2, ...}``)."""
    from trainop_core.api import trainjob as v2

    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {
        "apiVersion": v2.API_VERSION,
        "kind": v2.TRAINJOB,
        "metadata": metadata,
        "spec": {"runtimeRef": {"name": runtime}, **spec},
    }
