"""How replicas find each other on Kubernetes: one headless Service per pod, named like it."""

from __future__ import annotations

from trainop_core.api.job import TrainingJob
from trainop_core.api.podtemplate import default_container
from trainop_core.kinds.base import Kind
from trainop_core.kinds.common import replica_spec


def replica_name(job_name: str, rtype: str, index: int) -> str:
    """`<job>-<lowercase rtype>-<index>`: the pod's and its Service's name ("/" is not allowed)."""
    return f"{job_name}-{rtype.lower()}-{index}".replace("/", "-")


class KubernetesAddressing:
    """Addresses as Kubernetes DNS serves them for the per-replica headless Services."""

    def __init__(self, job: TrainingJob, kind: Kind, cluster_domain: str = "") -> None:
        self._job = job
        self._kind = kind
        self._suffix = f".{job.namespace}.svc" + (f".{cluster_domain}" if cluster_domain else "")
        self._ports: dict[str, int] = {}

    def host(self, rtype: str, index: int, *, fqdn: bool = False) -> str:
        """The Service name; with `fqdn`, `<name>.<ns>.svc[.<domain>]`. Pure."""
        name = replica_name(self._job.name, rtype, index)
        return name + self._suffix if fqdn else name

    def port(self, rtype: str, index: int) -> int:
        """The kind's named port on the replica type's default container, else its default. Pure."""
        if rtype not in self._ports:
            self._ports[rtype] = self._template_port(rtype)
        return self._ports[rtype]

    @property
    def waits_for_dns(self) -> bool:
        """Service DNS records appear some time after the pods: yes."""
        return True

    def _template_port(self, rtype: str) -> int:
        spec = replica_spec(self._job, rtype)
        container = default_container(spec.template, self._kind.default_container) if spec else None
        for port in (container or {}).get("ports") or []:
            if isinstance(port, dict) and port.get("name") == self._kind.port_name:
                return int(port.get("containerPort", self._kind.default_port))
        return self._kind.default_port
