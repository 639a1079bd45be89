"""A real Kubernetes control plane for tests, started the way envtest does it.

etcd and kube-apiserver (and, by default, kube-controller-manager running only its garbage
collector and namespace controllers) on free 127.0.0.1 ports, with a self-signed serving
certificate, static token authentication (an admin in ``system:masters``), RBAC authorization and
a service-account signing key, so ServiceAccount tokens work. There is no kubelet or node: pods
stay Pending unless a stand-in (:class:`~trainop_core.testing.kubelet.Kubelet`) moves them or a
process node (:mod:`trainop_core.node`) runs them; with ``scheduler=True`` a real kube-scheduler
binds pods to nodes, and ``node_monitor_grace`` adds kube-controller-manager's node lifecycle
(a node whose lease expires is marked, its pods evicted) and pod garbage collection. Nor is there
the ClusterRole aggregation controller: the built-in aggregated roles (admin, edit, view) grant
nothing; bind your own ClusterRoles. Importing this module needs only the
standard library::

    from trainop_core.testing.controlplane import ControlPlane

    with ControlPlane() as cp:                  # ~4 s to ready once the binaries are built
        cp.kubeconfig                           # admin kubeconfig (mode 0600) for kubectl
        cp.rest.get("/api/v1/namespaces")       # raw JSON as admin (trainop_core.testing.rest)
        token = cp.service_account_token("ns", "robot", cluster_roles=["view"])
        cp.kubeconfig_for(token)                # a kubeconfig for that identity
        cp.api_client()                         # kubernetes.client.ApiClient (lazy import)

The binaries come from :mod:`trainop_core.testing.binaries` (``python -m
trainop_core.testing.binaries`` builds them). Every process belongs to a process group led by a
watchdog (:mod:`trainop_core.testing._reaper`), so even a SIGKILLed test run leaves no etcd or
kube-apiserver behind and no data directory. Each process logs to ``<data_dir>/<name>.log``; a
failed start raises :class:`ControlPlaneError` quoting those logs.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import _reaper
from .rest import Obj, Rest, RestError

if TYPE_CHECKING:  # imported when needed: `python -m ...binaries` must not find it loaded
    from trainop_core.node.pki import KubeletPki

    from .binaries import KubeBinaries

ADMIN_USER = "trainop-admin"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class ControlPlaneError(RuntimeError):
    """The control plane could not start (the message quotes the processes' logs)."""


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager) on 127.0.0.1; see the module docstring.

    ``controller_manager`` runs kube-controller-manager with ``garbagecollector,namespace`` (owner
    references are collected, deleted namespaces go away). ``watch_cache=False`` makes watches read
    etcd directly, so :meth:`compact_etcd` turns an old resourceVersion into a real 410 Gone.
    ``apiserver_flags`` are appended to kube-apiserver's command line,
    ``controller_manager_flags`` to kube-controller-manager's. ``kubelet_pki`` (a
    :class:`~trainop_core.node.pki.KubeletPki`) makes kube-apiserver present its kubelet client
    certificate to nodes and check their serving certificates. ``crds`` are installed
    (and served) before kube-controller-manager starts: its garbage collector discovers resource
    types every 30 s, so owner references to a CRD's objects installed later are only collected
    once it has noticed the CRD.

    ``scheduler`` starts kube-scheduler (leader election off, the admin's kubeconfig): pods with
    the default schedulerName are bound to Ready nodes that fit them. ``node_monitor_grace``
    (seconds) also runs the node lifecycle, taint eviction, pod garbage collection and
    EndpointSlice controllers, a node being marked unreachable that long after its last lease
    renewal, and pods tolerating an unreachable or not-ready node for as long (kube-apiserver's
    default tolerations). Leave it None where kubelet stand-ins, which renew no lease, hold pods.

    ``service_accounts`` makes pods get what a cluster gives them to call the API: kube-apiserver's
    ServiceAccount admission (every pod a ``kube-api-access-*`` projected volume: a bound token,
    ``kube-root-ca.crt``, its namespace) and kube-controller-manager's service-account,
    token and root-CA publisher controllers (``default`` in every namespace, the ConfigMap
    ``kube-root-ca.crt`` holding :attr:`ca_file`). Admission then refuses a pod whose
    ServiceAccount does not exist, so it needs ``controller_manager``; :meth:`ensure_namespace`
    waits for the namespace's ``default``. Process nodes (:mod:`trainop_core.node`) project the
    volume; a kubelet stand-in ignores it.
    """

    def __init__(
        self,
        *,
        binaries: KubeBinaries | None = None,
        controller_manager: bool = True,
        watch_cache: bool = True,
        kubelet_pki: KubeletPki | None = None,
        apiserver_flags: Sequence[str] = (),
        controller_manager_flags: Sequence[str] = (),
        crds: Iterable[Obj] = (),
        ready_timeout: float = 90.0,
        scheduler: bool = False,
        node_monitor_grace: float | None = None,
        service_accounts: bool = False,
    ) -> None:
        if service_accounts and not controller_manager:
            raise ValueError("service_accounts needs controller_manager (who makes `default`)")
        self.service_accounts = service_accounts
        self.binaries = binaries
        self.with_controller_manager = controller_manager
        self.watch_cache = watch_cache
        self.apiserver_flags = list(apiserver_flags)
        self.controller_manager_flags = list(controller_manager_flags)
        if kubelet_pki is not None:
            self.apiserver_flags += kubelet_pki.apiserver_flags()
        self.crds = list(crds)
        self.ready_timeout = ready_timeout
        self.with_scheduler = scheduler
        self.node_monitor_grace = node_monitor_grace
        self.data_dir = Path()
        self.admin_token = secrets.token_hex(24)
        self.etcd_url = ""
        self.url = ""
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.start_seconds = 0.0
        self._reaper: subprocess.Popen[bytes] | None = None
        self._rest: Rest | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> ControlPlane:
        """Start every process and wait until the API server is ready. Raises ControlPlaneError."""
        started = time.monotonic()
        binaries = self.binaries or _binaries()
        self.data_dir = Path(tempfile.mkdtemp(prefix="trainop-cp-"))
        try:
            self._start_reaper()
            self._start_etcd(binaries)
            self._start_apiserver(binaries)
            self.install_crds(self.crds)
            if self.with_controller_manager:
                self._start_controller_manager(binaries)
            if self.with_scheduler:
                self._start_scheduler(binaries)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def stop(self, grace: float = 5.0) -> None:
        """Terminate every process (SIGTERM, then SIGKILL after `grace`), remove the data dir.
        Idempotent."""
        for name in reversed(list(self.processes)):
            _terminate(self.processes.pop(name), grace)
        if self._reaper is not None:
            assert self._reaper.stdin is not None
            self._reaper.stdin.close()  # end of file: it reaps what is left and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(grace + 5)
            self._reaper = None
        if self.data_dir != Path():
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- clients and identities --------------------------------------------------------------
    @property
    def ca_file(self) -> Path:
        """The API server's self-signed serving certificate (trust it as the CA)."""
        return self.data_dir / "certs" / "apiserver.crt"

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (mode 0600)."""
        return self.data_dir / "kubeconfig"

    @property
    def rest(self) -> Rest:
        """A raw JSON client acting as the admin."""
        if self._rest is None:
            self._rest = self.rest_for(self.admin_token)
        return self._rest

    def rest_for(self, token: str, user_agent: str = "trainop-testing") -> Rest:
        """A raw JSON client acting as whoever `token` authenticates."""
        return Rest(self.url, token, str(self.ca_file), user_agent=user_agent)

    def kubeconfig_for(
        self, token: str, path: str | Path | None = None, user: str = "user", namespace: str = ""
    ) -> Path:
        """Write a kubeconfig (mode 0600) that authenticates with `token` (its context's default
        `namespace` if given); returns its path."""
        if path is None:
            path = Path(tempfile.mkstemp(prefix="kubeconfig-", dir=self.data_dir)[1])
        return write_kubeconfig(
            Path(path), self.url, self.ca_file.read_bytes(), token, user=user, namespace=namespace
        )

    def api_client(self, token: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` for `token` (default: the admin); imports it."""
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        config.ssl_ca_cert = str(self.ca_file)
        config.api_key = {"authorization": f"Bearer {token or self.admin_token}"}
        return client.ApiClient(config)

    def service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        cluster_roles: Iterable[str] = (),
        expiration_seconds: int = 3600,
    ) -> str:
        """Create (or reuse) ServiceAccount `namespace/name`, bind it to each ClusterRole in
        `cluster_roles` cluster-wide, and return a token for it (TokenRequest API)."""
        self.ensure_namespace(namespace)
        accounts = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        _create_or_keep(self.rest, accounts, {"metadata": {"name": name}})
        subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
        for role in cluster_roles:
            binding = {
                "metadata": {"name": f"{namespace}-{name}-{role}".replace(":", "-")},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [subject],
            }
            _create_or_keep(
                self.rest, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding
            )
        request = {"spec": {"expirationSeconds": expiration_seconds}}
        answer = self.rest.create(f"{accounts}/{name}/token", request)
        return str(answer["status"]["token"])

    # --- objects -------------------------------------------------------------------------------
    def ensure_namespace(self, name: str, timeout: float = 60.0) -> None:
        """Create namespace `name` unless it exists; with ``service_accounts``, wait until its
        ``default`` ServiceAccount does (admission refuses pods before)."""
        _create_or_keep(self.rest, "/api/v1/namespaces", {"metadata": {"name": name}})
        if self.service_accounts:
            path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
            _wait(lambda: self._exists(path), timeout, f"ServiceAccount {name}/default")

    def _exists(self, path: str) -> bool:
        try:
            self.rest.get(path)
        except RestError as err:
            if err.status == 404:
                return False
            raise
        return True

    def install_crds(self, crds: Iterable[Obj], timeout: float = 60.0) -> None:
        """Create or replace each CRD and wait until it is Established and its resource served."""
        crds = list(crds)
        for crd in crds:
            self._put_crd(crd)
        for crd in crds:
            served = functools.partial(self._crd_served, crd)
            _wait(served, timeout, f"CRD {crd['metadata']['name']} served")

    def _put_crd(self, crd: Obj) -> None:
        body: Obj = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}
        body.update({k: v for k, v in crd.items() if k != "status"})
        try:
            self.rest.create(CRD_PATH, body)
        except RestError as err:
            if err.status != 409:
                raise
            path = f"{CRD_PATH}/{crd['metadata']['name']}"
            version = self.rest.get(path)["metadata"]["resourceVersion"]
            body["metadata"] = {**body["metadata"], "resourceVersion": version}
            self.rest.replace(path, body)

    def _crd_served(self, crd: Obj) -> bool:
        current = self.rest.get(f"{CRD_PATH}/{crd['metadata']['name']}")
        conditions = current.get("status", {}).get("conditions") or []
        if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return False
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served", True))
        try:
            self.rest.get(f"/apis/{spec['group']}/{version}/{spec['names']['plural']}", limit=1)
        except RestError as err:
            if err.status == 404:
                return False
            raise
        return True

    # --- etcd ----------------------------------------------------------------------------------
    def etcd_revision(self) -> int:
        """etcd's current revision (what kube-apiserver calls the resourceVersion)."""
        answer = _etcd_call(
            self.etcd_url, "/v3/kv/range", {"key": base64.b64encode(b"\0").decode()}
        )
        return int(answer["header"]["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd's history up to `revision` (default: now); returns the revision. Watches
        and lists from an older resourceVersion then get 410 Gone, when they reach etcd (start
        with ``watch_cache=False`` so that watches always do)."""
        revision = revision or self.etcd_revision()
        _etcd_call(self.etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    # --- measurements --------------------------------------------------------------------------
    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each process now, by name (Linux)."""
        return {name: _rss(process.pid) for name, process in self.processes.items()}

    # --- processes -----------------------------------------------------------------------------
    def _start_reaper(self) -> None:
        self._reaper = subprocess.Popen(
            [sys.executable, "-I", _reaper.__file__, str(self.data_dir)],
            stdin=subprocess.PIPE,
            **_in_group(0),
        )

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Run one more process (e.g. a controller) with the plane's: in its watchdog's process
        group, logged to ``<data_dir>/<name>.log``, stopped by :meth:`stop_process` or
        :meth:`stop` (before the processes started earlier)."""
        self._spawn(name, argv)
        return self.processes[name]

    def wait_ready(self, name: str, ready: Callable[[], bool], timeout: float) -> None:
        """Wait until `ready()`; raises ControlPlaneError quoting the logs if process `name`
        exits or `timeout` seconds pass first."""
        process = self.processes[name]
        deadline = time.monotonic() + timeout
        while not ready():
            if process.poll() is not None:
                raise ControlPlaneError(f"{name} exited with {process.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} not ready after {timeout:.0f} s\n{self.logs()}")
            time.sleep(0.1)

    def stop_process(self, name: str, grace: float = 5.0) -> None:
        """End process `name` (SIGTERM, SIGKILL after `grace`) if it runs. Idempotent."""
        process = self.processes.pop(name, None)
        if process is not None:
            _terminate(process, grace)

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self._reaper is not None
        log = open(self.data_dir / f"{name}.log", "wb")  # noqa: SIM115  # the child owns it
        with log:
            self.processes[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                **_in_group(self._reaper.pid),
            )

    def _start_etcd(self, binaries: KubeBinaries) -> None:
        client, peer = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
        self.etcd_url = client
        self._spawn(
            "etcd",
            [
                str(binaries.etcd),
                "--name=default",
                f"--data-dir={self.data_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait_ready("etcd", lambda: http_ok(f"{client}/health"))

    def _start_apiserver(self, binaries: KubeBinaries) -> None:
        port = _free_port()
        self.url = f"https://127.0.0.1:{port}"
        key = self.data_dir / "service-account.key"
        _write_private(key, _rsa_private_key_pem())
        tokens = self.data_dir / "tokens.csv"
        _write_private(tokens, f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        (self.data_dir / "certs").mkdir()
        self._spawn(
            "kube-apiserver",
            [
                str(binaries.kube_apiserver),
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--etcd-servers={self.etcd_url}",
                f"--cert-dir={self.data_dir / 'certs'}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={self.url}",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                *self._admission_flags(),
                "--allow-privileged=true",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
                "--endpoint-reconciler-type=none",  # 127.0.0.1 is no valid endpoint: no noise
                f"--watch-cache={'true' if self.watch_cache else 'false'}",
                *self._toleration_flags(),
                *self.apiserver_flags,
            ],
        )
        self._wait_ready("kube-apiserver", self._apiserver_ready)
        _write_private(self.kubeconfig, "")
        self.kubeconfig_for(self.admin_token, self.kubeconfig, user=ADMIN_USER)

    def _admission_flags(self) -> list[str]:
        return [] if self.service_accounts else ["--disable-admission-plugins=ServiceAccount"]

    def _apiserver_ready(self) -> bool:
        if not self.ca_file.exists():
            return False
        try:
            status, body = self.rest.request_raw("GET", "/readyz")
        except RestError:
            return False
        except (ssl.SSLError, OSError):
            # The API server may still be writing its certificate: read it again next time.
            self._rest = None
            return False
        return status == 200 and body.strip() == b"ok"

    def _start_controller_manager(self, binaries: KubeBinaries) -> None:
        port = _free_port()
        self._spawn(
            "kube-controller-manager",
            [
                str(binaries.kube_controller_manager),
                f"--kubeconfig={self.kubeconfig}",
                *self._controller_flags(),
                *self._service_account_flags(),
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--profiling=false",
                *self.controller_manager_flags,
            ],
        )
        self._wait_ready(
            "kube-controller-manager", lambda: http_ok(f"https://127.0.0.1:{port}/healthz")
        )

    def _controller_flags(self) -> list[str]:
        controllers = ["garbagecollector", "namespace"]
        if self.service_accounts:
            controllers += [
                "serviceaccount-controller",
                "serviceaccount-token-controller",
                "root-ca-certificate-publisher-controller",
            ]
        if self.node_monitor_grace is None:
            return [f"--controllers={','.join(controllers)}"]
        controllers += [
            "node-lifecycle-controller",
            "taint-eviction-controller",
            "pod-garbage-collector-controller",
            "endpointslice-controller",
        ]
        return [
            f"--controllers={','.join(controllers)}",
            f"--node-monitor-grace-period={self.node_monitor_grace:g}s",
            "--node-monitor-period=1s",
        ]

    def _service_account_flags(self) -> list[str]:
        if not self.service_accounts:
            return []
        return [
            f"--root-ca-file={self.ca_file}",
            f"--service-account-private-key-file={self.data_dir / 'service-account.key'}",
        ]

    def _toleration_flags(self) -> list[str]:
        if self.node_monitor_grace is None:
            return []
        seconds = max(1, round(self.node_monitor_grace))
        return [
            f"--default-not-ready-toleration-seconds={seconds}",
            f"--default-unreachable-toleration-seconds={seconds}",
        ]

    def _start_scheduler(self, binaries: KubeBinaries) -> None:
        port = _free_port()
        self._spawn(
            "kube-scheduler",
            [
                str(binaries.kube_scheduler),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--profiling=false",
            ],
        )
        self._wait_ready("kube-scheduler", lambda: http_ok(f"https://127.0.0.1:{port}/healthz"))

    def _wait_ready(self, name: str, ready: Callable[[], bool]) -> None:
        self.wait_ready(name, ready, self.ready_timeout)

    def logs(self, tail: int = 40) -> str:
        """The last `tail` lines of every process's log, for error messages."""
        parts = []
        for path in sorted(self.data_dir.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {path} (last {len(lines)} lines)\n" + "\n".join(lines))
        return "\n".join(parts)


def write_kubeconfig(
    path: Path, server: str, ca_pem: bytes, token: str, *, user: str = "user", namespace: str = ""
) -> Path:
    """Write a one-context kubeconfig (mode 0600): `server`, trusting `ca_pem`, as `token`.

    Every value is YAML data (dumped, never pasted into text), so a crafted user or namespace
    cannot add keys."""
    import yaml

    context: dict[str, str] = {"cluster": "trainop-test", "user": user}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "trainop-test",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "trainop-test", "context": context}],
        "current-context": "trainop-test",
    }
    return _write_private(path, yaml.safe_dump(config, sort_keys=False))


def _binaries() -> KubeBinaries:
    from .binaries import BinaryBuildError, kubernetes_binaries

    try:
        return kubernetes_binaries(build=False)
    except BinaryBuildError as exc:  # its message names the command that builds them
        raise ControlPlaneError(str(exc)) from exc


def _in_group(pgid: int) -> dict[str, Any]:
    """Popen arguments that put the child in process group `pgid` (0: a new group it leads)."""
    if sys.version_info >= (3, 11):
        return {"process_group": pgid}
    return {"preexec_fn": lambda: os.setpgid(0, pgid)}  # pragma: no cover  # Python 3.10


def _create_or_keep(rest: Rest, path: str, body: Obj) -> None:
    try:
        rest.create(path, body)
    except RestError as err:
        if err.status != 409:
            raise


def _terminate(process: subprocess.Popen[bytes], grace: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return _free_port()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Does a GET of `url` (a probe of our own child process: http, or https unverified) answer
    200 within `timeout` seconds?"""
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only a liveness probe of our own child process
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _etcd_call(etcd_url: str, path: str, body: Obj) -> Obj:
    import json

    request = urllib.request.Request(
        etcd_url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        answer: Obj = json.loads(resp.read())
    return answer


def _rsa_private_key_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


def _write_private(path: Path, text: str) -> Path:
    """Owner-only, replaced atomically, never written through a link (see `private_files`)."""
    from trainop_core.private_files import replace

    return replace(path, text)


def _rss(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)
