"""Kueue, the Kubernetes job queue, running envtest-style next to a test :class:`ControlPlane`.

Kueue is built once per machine from the Go module proxy (``sigs.k8s.io/kueue`` at
:data:`KUEUE_VERSION`, package ``cmd/kueue``) by
:func:`~trainop_core.testing.binaries.build_go_packages` and cached like kube-apiserver. Its
CRDs and its webhook configurations come from the same module (``config/components/crd/bases``
and ``config/components/webhook/manifests.yaml``), so they always match the binary.

:class:`Kueue` runs the manager as one more process of the control plane (its log is
``<data_dir>/kueue.log``): its Configuration file turns internal certificate management and leader
election off, serves the webhooks on 127.0.0.1 with a certificate written here (a fresh CA and a
serving certificate for 127.0.0.1), and enables the Kubeflow v1 frameworks (:data:`FRAMEWORKS`),
plus Kubeflow Trainer's TrainJob where asked (:data:`TRAINJOB`). That integration's controller
watches the JobSets Trainer would make, so JobSet's CRD is installed with Kueue's (from the
``sigs.k8s.io/jobset`` module at the version Kueue's go.mod pins: :func:`dependency_crds`); no
JobSet controller runs. Trainer's own CRDs are the caller's (trainop's, as the operator serves
them) and must be served before Kueue starts for the integration to start with it.
Only the webhooks for those frameworks and for Kueue's own objects are registered with the API
server, pointed at the loopback URL with the CA as caBundle; the job webhooks are limited to
namespaces labelled :data:`NAMESPACE_LABEL` so other tests sharing the API server never call them.

Kueue 0.17-0.19 read a metrics certificate from the fixed path :data:`METRICS_CERT_DIR` whenever
internal certificate management is off, and exit if it is missing. Metrics are not served here
(bindAddress "0"), but the file must exist: :func:`ensure_metrics_certificate` writes a throwaway
self-signed pair there when it can, and otherwise says what to run.
"""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

from trainop_core.kinds.table import builtin_kinds

from .binaries import build_go_packages, go_module_dir
from .controlplane import ControlPlane, ControlPlaneError, free_port, http_ok
from .rest import Obj, RestError

#: The one place Kueue's version is pinned (see docs/architecture.md, "Kueue in the tests").
KUEUE_VERSION = "v0.19.2"
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_PACKAGE = f"{KUEUE_MODULE}/cmd/kueue"
#: The v1 kinds Kueue's kubeflowjob adapter lacks: MXJob (dropped after v0.10) and MPIJob (only
#: mpi-operator's v2beta1 is integrated).
WITHOUT_KUEUE = frozenset({"MXJob", "MPIJob"})
#: The Kubeflow v1 kinds Kueue drives through its kubeflowjob adapter, as Kueue names them.
FRAMEWORKS = tuple(
    f"kubeflow.org/{kind.kind.lower()}"
    for kind in builtin_kinds()
    if kind.kind not in WITHOUT_KUEUE
)
#: Kubeflow Trainer v2's TrainJob, as Kueue names the integration (Kueue 0.14 and later).
TRAINJOB = "trainer.kubeflow.org/trainjob"
JOBSET_MODULE = "sigs.k8s.io/jobset"
#: Job webhooks are only called for namespaces with this label set to "true".
NAMESPACE_LABEL = "trainop.testing/kueue"
#: Where Kueue reads its metrics certificate when internal cert management is off (fixed upstream).
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
API = "/apis/kueue.x-k8s.io/v1beta2"
_ADMISSION = "/apis/admissionregistration.k8s.io/v1"
_PLURALS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


def kueue_binary(*, build: bool = True, log: Callable[[str], None] | None = None) -> Path:
    """Kueue's manager at :data:`KUEUE_VERSION`, built from the Go module proxy into the cache
    (or reused). Raises :class:`~trainop_core.testing.binaries.BinaryBuildError`."""
    stamp = {f"{KUEUE_MODULE}/pkg/version.GitVersion": KUEUE_VERSION}
    built = build_go_packages(
        KUEUE_MODULE, KUEUE_VERSION, [KUEUE_PACKAGE], link_variables=stamp, build=build, log=log
    )
    return built["kueue"]


def kueue_source() -> Path:
    """The module's source tree in Go's module cache (downloaded if needed)."""
    return go_module_dir(KUEUE_MODULE, KUEUE_VERSION)


def kueue_crds(source: Path | None = None) -> list[Obj]:
    """Kueue's CRDs, as its module ships them."""
    import yaml

    bases = (source or kueue_source()) / "config" / "components" / "crd" / "bases"
    return [yaml.safe_load(path.read_text()) for path in sorted(bases.glob("*.yaml"))]


def dependency_crds(frameworks: Sequence[str], source: Path | None = None) -> list[Obj]:
    """The CRDs Kueue needs for `frameworks` besides the jobs' own: JobSet's for the TrainJob
    integration (its controller owns JobSets), at the version Kueue's go.mod requires."""
    import yaml

    if TRAINJOB not in frameworks:
        return []
    version = required_version(JOBSET_MODULE, source)
    bases = go_module_dir(JOBSET_MODULE, version) / "config" / "components" / "crd" / "bases"
    return [yaml.safe_load(path.read_text()) for path in sorted(bases.glob("*.yaml"))]


def required_version(module: str, source: Path | None = None) -> str:
    """The version of `module` Kueue's go.mod requires. Raises ControlPlaneError if none."""
    go_mod = ((source or kueue_source()) / "go.mod").read_text()
    match = re.search(rf"^\s*{re.escape(module)} (v\S+)", go_mod, re.MULTILINE)
    if match is None:
        raise ControlPlaneError(f"Kueue {KUEUE_VERSION}'s go.mod requires no {module}")
    return match.group(1)


def webhook_configurations(
    url: str, ca_bundle: bytes, frameworks: Sequence[str] = FRAMEWORKS, source: Path | None = None
) -> list[Obj]:
    """Kueue's Mutating/ValidatingWebhookConfigurations, keeping only the webhooks for Kueue's own
    objects and for `frameworks`, each calling `url` + its path and trusting `ca_bundle`."""
    import base64

    import yaml

    manifests = (source or kueue_source()) / "config" / "components" / "webhook" / "manifests.yaml"
    resources = {_framework_resource(f) for f in frameworks}
    configs = []
    for config in yaml.safe_load_all(manifests.read_text()):
        kept = copy.deepcopy(config)
        kept["metadata"] = {"name": f"trainop-testing-kueue-{config['metadata']['name']}"}
        kept["webhooks"] = []
        for hook in config["webhooks"]:
            groups = {
                (g, r)
                for rule in hook["rules"]
                for g in rule["apiGroups"]
                for r in rule["resources"]
            }
            own = any(g == "kueue.x-k8s.io" for g, _ in groups)
            if not own and not groups & resources:
                continue
            hook = copy.deepcopy(hook)
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": url + path,
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            if not own:
                hook["namespaceSelector"] = {"matchLabels": {NAMESPACE_LABEL: "true"}}
            kept["webhooks"].append(hook)
        configs.append(kept)
    return configs


def _framework_resource(framework: str) -> tuple[str, str]:
    group, kind = framework.split("/")
    return group, f"{kind}s"


def ensure_metrics_certificate(directory: Path = METRICS_CERT_DIR) -> None:
    """A throwaway self-signed pair in `directory` (Kueue reads it at start, see the module
    docstring); kept if one is there. Raises ControlPlaneError saying what to run if it cannot."""
    if (directory / "tls.crt").exists() and (directory / "tls.key").exists():
        return
    from trainop_core.operator.webhook.certs import new_ca

    pair = new_ca(timedelta(days=3650))
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in (("tls.key", pair.key_pem), ("tls.crt", pair.cert_pem)):
            _write_atomically(directory / name, data)
    except OSError as exc:
        raise ControlPlaneError(
            f"Kueue {KUEUE_VERSION} needs a certificate in {directory} when it does not manage "
            f"its own ({exc}); create one once with: sudo mkdir -p {directory} && sudo chown "
            f"$(id -u) {directory}"
        ) from exc


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


class Kueue:
    """Kueue's manager as a process of `control_plane`; see the module docstring.

    Start it after the control plane and the job CRDs (Kueue enables an integration only when
    its CRD is served). ``start()`` installs Kueue's CRDs, writes the certificates, configuration
    and kubeconfig, starts the manager, waits for ``/readyz`` and registers the webhooks;
    ``stop()`` removes them and ends the process. Idempotent.
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        *,
        binary: Path | None = None,
        frameworks: Sequence[str] = FRAMEWORKS,
        namespace: str = "kueue-system",
        ready_timeout: float = 90.0,
    ) -> None:
        self.control_plane = control_plane
        self.binary = binary
        self.frameworks = list(frameworks)
        self.namespace = namespace
        self.ready_timeout = ready_timeout
        self.directory = Path()
        self.webhook_port = 0
        self.health_port = 0
        self.start_seconds = 0.0
        self._registered: list[tuple[str, str]] = []

    def start(self) -> Kueue:
        started = time.monotonic()
        cp = self.control_plane
        binary = self.binary or kueue_binary(build=False)
        source = kueue_source()
        ensure_metrics_certificate()
        cp.install_crds(kueue_crds(source) + dependency_crds(self.frameworks, source))
        cp.ensure_namespace(self.namespace)
        self.directory = Path(tempfile.mkdtemp(prefix="kueue-", dir=cp.data_dir))
        ca = self._write_certificates()
        config = self._write_configuration()
        kubeconfig = cp.kubeconfig_for(cp.admin_token, self.directory / "kubeconfig", user="kueue")
        argv = [
            str(binary),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            "--zap-log-level=2",
        ]
        try:
            cp.spawn("kueue", argv)
            cp.wait_ready("kueue", self._ready, self.ready_timeout)
            url = f"https://127.0.0.1:{self.webhook_port}"
            for config_object in webhook_configurations(url, ca, self.frameworks, source):
                self._register(config_object)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        for plural, name in reversed(self._registered):
            try:
                self.control_plane.rest.delete(f"{_ADMISSION}/{plural}/{name}")
            except RestError as err:
                if err.status != 404:
                    raise
        self._registered.clear()
        self.control_plane.stop_process("kueue")

    def __enter__(self) -> Kueue:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_namespace(self, namespace: str) -> None:
        """Let Kueue's job webhooks see `namespace` (they only see labelled namespaces)."""
        body = {"metadata": {"labels": {NAMESPACE_LABEL: "true"}}}
        self.control_plane.rest.patch(f"/api/v1/namespaces/{namespace}", body)

    @property
    def log_path(self) -> Path:
        return self.control_plane.data_dir / "kueue.log"

    def _write_certificates(self) -> bytes:
        from trainop_core.operator.webhook.certs import new_ca, new_serving

        ca = new_ca(timedelta(days=1))
        serving = new_serving(ca, ["127.0.0.1"], timedelta(days=1))
        certs = self.directory / "certs"
        certs.mkdir()
        (certs / "tls.crt").write_bytes(serving.cert_pem)
        (certs / "tls.key").write_bytes(serving.key_pem)
        os.chmod(certs / "tls.key", 0o600)
        return ca.cert_pem

    def _write_configuration(self) -> Path:
        self.webhook_port, self.health_port = free_port(), free_port()
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": self.namespace,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "port": self.webhook_port,
                "host": "127.0.0.1",
                "certDir": str(self.directory / "certs"),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": -1, "burst": 500},
            "integrations": {"frameworks": self.frameworks},
            # Makes Kueue record each workload's PodsReady condition from the job's Running
            # condition (what the tests check); admission is not blocked by it.
            "waitForPodsReady": {"timeout": "5m", "blockAdmission": False},
            # The visibility API is an aggregated API server; nothing here registers it.
            "featureGates": {"VisibilityOnDemand": False},
        }
        path = self.directory / "config.yaml"
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        return path

    def _ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.health_port}/readyz")

    def _register(self, config: Obj) -> None:
        plural = _PLURALS[config["kind"]]
        name = config["metadata"]["name"]
        rest = self.control_plane.rest
        try:
            rest.create(f"{_ADMISSION}/{plural}", config)
        except RestError as err:
            if err.status != 409:
                raise
            current = rest.get(f"{_ADMISSION}/{plural}/{name}")
            config["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            rest.replace(f"{_ADMISSION}/{plural}/{name}", config)
        self._registered.append((plural, name))


__all__ = [
    "FRAMEWORKS",
    "KUEUE_VERSION",
    "QUEUE_LABEL",
    "TRAINJOB",
    "Kueue",
    "dependency_crds",
    "kueue_binary",
    "kueue_crds",
    "webhook_configurations",
]
