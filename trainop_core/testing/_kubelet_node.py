"""What the kubelet stand-in shows the API server of itself: a Node and the logs endpoint.

A real API server answers ``pods/log`` by calling the kubelet of the pod's node over HTTPS, at
the node's InternalIP and ``status.daemonEndpoints.kubeletEndpoint.Port``. The stand-in serves
``/containerLogs/{namespace}/{pod}/{container}`` (``tailLines``, ``sinceTime``, ``timestamps``,
``limitBytes``, ``follow``, applied in the kubelet's order: the last lines, then those not older
than the time, each line stamped with the time its text was given, then the byte limit) from the
text tests give it, with a throw-away self-signed certificate (kube-apiserver does not check a
kubelet's certificate unless ``--kubelet-certificate-authority`` is set).
"""

from __future__ import annotations

import bisect
import datetime
import ssl
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from trainop_core.private_files import write_new

from ._podstatus import POD_IP

LogKey = tuple[str, str, str]  # namespace, pod, container


def node_object(name: str, port: int) -> dict[str, Any]:
    """A Ready Node at 127.0.0.1 whose kubelet listens on `port`, with room for many pods."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "10000", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "trainop"}},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": POD_IP},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "trainop kubelet stand-in",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "trainop-standin",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "trainop://0",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
                "kernelVersion": "",
                "osImage": "trainop kubelet stand-in",
            },
        },
    }


class PodLogs:
    """Container logs by (namespace, pod, container); thread-safe; `finished` ends follows."""

    def __init__(self) -> None:
        self._text: dict[LogKey, str] = {}
        self._given: dict[LogKey, list[tuple[int, float]]] = {}  # (offset, when) of each text
        self._finished: set[tuple[str, str]] = set()
        self._cond = threading.Condition()

    def append(self, key: LogKey, text: str) -> None:
        with self._cond:
            before = self._text.get(key, "")
            self._given.setdefault(key, []).append((len(before), time.time()))
            self._text[key] = before + text
            self._cond.notify_all()

    def lines(self, key: LogKey) -> list[tuple[float, str]]:
        """Every line (newline kept) with the time its text was given."""
        with self._cond:
            text, given = self._text.get(key, ""), list(self._given.get(key, []))
        offsets = [offset for offset, _ in given]
        out, start = [], 0
        for line in text.splitlines(keepends=True):
            chunk = max(0, bisect.bisect_right(offsets, start) - 1)
            out.append((given[chunk][1] if given else 0.0, line))
            start += len(line)
        return out

    def finish(self, namespace: str, pod: str) -> None:
        with self._cond:
            self._finished.add((namespace, pod))
            self._cond.notify_all()

    def read(self, key: LogKey) -> str:
        with self._cond:
            return self._text.get(key, "")

    def wait_for_more(self, key: LogKey, offset: int, timeout: float) -> tuple[str, bool]:
        """Text past `offset` (waiting up to `timeout` for some) and whether the pod finished."""
        with self._cond:
            self._cond.wait_for(
                lambda: len(self._text.get(key, "")) > offset or key[:2] in self._finished,
                timeout,
            )
            return self._text.get(key, "")[offset:], key[:2] in self._finished


class LogServer:
    """The HTTPS logs endpoint on 127.0.0.1 (a free port); `stop()` ends it and its follows."""

    def __init__(self, logs: PodLogs) -> None:
        self.logs = logs
        self.stopping = threading.Event()
        handler = type("Handler", (_LogHandler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.socket = _tls_context().wrap_socket(self._httpd.socket, server_side=True)
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="kubelet-logs", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


class _LogHandler(BaseHTTPRequestHandler):
    owner: LogServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # http.server naming
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._send(404, b"not found")
            return
        key: LogKey = (parts[1], parts[2], parts[3])
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if query.get("follow") == "true":
            self._follow(key, query)
        else:
            self._send(200, _cut(self.owner.logs.lines(key), query).encode())

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _follow(self, key: LogKey, query: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        offset, finished = 0, False
        if "tailLines" in query:  # a kubelet starts a followed log at its last lines too
            last = _cut(self.owner.logs.lines(key), {"tailLines": query["tailLines"]})
            offset = len(self.owner.logs.read(key)) - len(last)
        try:
            while not finished and not self.owner.stopping.is_set():
                more, finished = self.owner.logs.wait_for_more(key, offset, 0.5)
                if more:
                    data = more.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    offset += len(more)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True


def _cut(lines: list[tuple[float, str]], query: dict[str, str]) -> str:
    if "tailLines" in query:
        tail = int(query["tailLines"])
        lines = lines[-tail:] if tail else []
    if "sinceTime" in query:
        since = datetime.datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
        lines = [(when, line) for when, line in lines if when >= since.timestamp()]
    stamped = query.get("timestamps") == "true"
    text = "".join(f"{_stamp(when)} {line}" if stamped else line for when, line in lines)
    if "limitBytes" in query:
        text = text.encode()[: int(query["limitBytes"])].decode(errors="ignore")
    return text


def _stamp(when: float) -> str:
    """The kubelet's RFC 3339 with nanoseconds, always nine digits."""
    whole = int(when)
    nanos = min(999_999_999, round((when - whole) * 1e9))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{nanos:09d}Z"


def _tls_context() -> ssl.SSLContext:
    cert, key = _self_signed()
    with tempfile.TemporaryDirectory() as tmp:
        cert_file, key_file = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        write_new(cert_file, cert)
        write_new(key_file, key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
    return context


def _self_signed() -> tuple[bytes, bytes]:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainop-kubelet")])
    start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(POD_IP))]), False
        )
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
