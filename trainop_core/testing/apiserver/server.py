"""``ApiServer``: the fake kube-apiserver's lifecycle, kubeconfig, and test-facing helpers."""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .codec import Codec
from .faults import Faults, Stats
from .gc import GarbageCollector
from .handler import ApiHandler
from .logs import PodLogs
from .store import Store

if TYPE_CHECKING:
    from types import TracebackType

    from kubernetes.client import ApiClient

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class ApiServer:
    """An in-process Kubernetes API server over loopback HTTP.

    ``history_size`` bounds the watch history (older resourceVersions get 410 Gone);
    ``bookmark_interval`` is the seconds between BOOKMARK events on watches that allow them;
    ``gc`` runs the garbage collector / namespace controller thread.
    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history_size: int = 50_000,
        bookmark_interval: float = 60.0,
        gc: bool = True,
        token: str = "trainop-test-token",
    ) -> None:
        self.store = Store(history_size)
        self.faults = Faults(self.store)
        self.logs = PodLogs()
        self.codec = Codec(self.store)
        self.bookmark_interval = bookmark_interval
        self.token = token
        self.stopping = threading.Event()
        self._host, self._port = host, port
        self._gc = GarbageCollector(self.store) if gc else None
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        namespaces = self.store.resource("namespaces")
        for name in DEFAULT_NAMESPACES:
            self.store.create(namespaces, "", {"metadata": {"name": name}})

    # ------------------------------------------------------------ lifecycle
    def start(self) -> ApiServer:
        """Bind and serve on a background thread; returns ``self``."""
        httpd = _HTTPServer((self._host, self._port), ApiHandler)
        httpd.ctx = self  # type: ignore[attr-defined]  # read by ApiHandler.ctx
        self._httpd = httpd
        self._port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            daemon=True,
            name=f"fake-apiserver-{self._port}",
        )
        self._thread.start()
        if self._gc is not None:
            self._gc.start()
        return self

    def stop(self) -> None:
        """Stop serving, end open watches and close every connection."""
        self.stopping.set()
        self.faults.stop_all_watches()
        if self._httpd is not None:
            self._httpd.shutdown()
            with self._conn_lock:
                for conn in list(self._connections):
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_RDWR)
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._gc is not None:
            self._gc.stop()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def connection_opened(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._connections.add(conn)

    def connection_closed(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._connections.discard(conn)

    # ------------------------------------------------------------- addresses
    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        return f"{self._host}:{self._port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def stats(self) -> Stats:
        return self.faults.stats

    def write_kubeconfig(self, path: str | Path, context: str = "trainop-fake") -> Path:
        """Write a kubeconfig (insecure HTTP cluster, token user) pointing at this server.

        Private (0600, like kubectl's): it holds the bearer token. Values are YAML data."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": "default"},
                }
            ],
            "current-context": context,
            "users": [{"name": context, "user": {"token": self.token}}],
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)  # an existing file keeps its mode otherwise
            yaml.safe_dump(config, handle, sort_keys=False)
        return path

    def api_client(self, **configuration: Any) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` for this server (imports ``kubernetes`` lazily).

        Keyword arguments are set as attributes of the client ``Configuration``.
        """
        client = importlib.import_module("kubernetes.client")  # optional, imported lazily

        config = client.Configuration()
        config.host = self.url
        config.api_key = {"authorization": f"Bearer {self.token}"}
        for name, value in configuration.items():
            setattr(config, name, value)
        return client.ApiClient(config)

    # -------------------------------------------------------------- pod logs
    def _log_container(self, namespace: str, pod: str, container: str | None) -> str:
        if container:
            return container
        found = self.store.find(self.store.resource("pods"), namespace, pod)
        containers = (found or {}).get("spec", {}).get("containers") or [{}]
        return str(containers[0].get("name", ""))

    def set_pod_log(
        self, namespace: str, pod: str, text: str, container: str | None = None
    ) -> None:
        """Replace the log of ``container`` (default: the pod's first container)."""
        self.logs.set(namespace, pod, self._log_container(namespace, pod, container), text)

    def append_pod_log(
        self, namespace: str, pod: str, text: str, container: str | None = None
    ) -> None:
        """Append to a container's log; followers (``follow=true``) receive it."""
        self.logs.append(namespace, pod, self._log_container(namespace, pod, container), text)
