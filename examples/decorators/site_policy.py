"""A site policy as a trainop decorator server (protocol: trainop_core/decorators/review.py).

Every pod of every job it is asked about gets the site's node pool (a nodeSelector and a
toleration for the pool's taint) and an env var naming the pool; Worker pods also get a
log-shipping sidecar. A job asking more GPUs per container than the site allows is refused.

    python examples/decorators/site_policy.py --port 8443            # http on 127.0.0.1
    python examples/decorators/site_policy.py --port 8443 --cert tls.crt --key tls.key

and point a DecoratorConfiguration at it (decorators.yaml here). Only the standard library: a
site can copy this file into any image. `serve()` runs one in a thread (the tests do).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_VERSION = "decoration.trainop.kubeflow.org/v1"
KIND = "PodDecorationReview"
POOL_LABEL = "trainop.example/pool"
POOL_ENV = "SITE_POOL"
MAX_GPUS = 8
MAX_REQUEST_BYTES = 8 * 1024 * 1024
SIDECAR = {
    "name": "log-shipper",
    "image": "busybox:1.36",
    "command": ["sh", "-c", "tail -F /var/log/training/*.log"],
}

# A responder turns a request body (parsed JSON) into (HTTP status, response bytes).
Responder = Callable[[Any], tuple[int, bytes]]


def site_policy(review: dict[str, Any], pool: str = "training") -> dict[str, Any]:
    """The policy: the response object for one PodDecorationReview request."""
    request = review["request"]
    pod = request["object"]
    too_many = _gpu_hog(pod)
    if too_many:
        return _response(request["uid"], allowed=False, message=too_many)
    patch = _pool_patch(pod, pool)
    if request["replicaType"] == "Worker":
        patch.append({"op": "add", "path": "/spec/containers/-", "value": SIDECAR})
    return _response(request["uid"], allowed=True, patch=patch)


def _pool_patch(pod: dict[str, Any], pool: str) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    patch = []
    if "nodeSelector" in spec:
        key = POOL_LABEL.replace("~", "~0").replace("/", "~1")
        patch.append({"op": "add", "path": f"/spec/nodeSelector/{key}", "value": pool})
    else:
        patch.append({"op": "add", "path": "/spec/nodeSelector", "value": {POOL_LABEL: pool}})
    toleration = {"key": POOL_LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}
    if "tolerations" in spec:
        patch.append({"op": "add", "path": "/spec/tolerations/-", "value": toleration})
    else:
        patch.append({"op": "add", "path": "/spec/tolerations", "value": [toleration]})
    for i, container in enumerate(spec.get("containers") or []):
        entry = {"name": POOL_ENV, "value": pool}
        if "env" in container:
            patch.append({"op": "add", "path": f"/spec/containers/{i}/env/-", "value": entry})
        else:
            patch.append({"op": "add", "path": f"/spec/containers/{i}/env", "value": [entry]})
    return patch


def _gpu_hog(pod: dict[str, Any]) -> str:
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        gpus = int(str(limits.get("nvidia.com/gpu", 0)) or 0)
        if gpus > MAX_GPUS:
            name = container.get("name")
            return f"container {name} asks {gpus} GPUs; this site allows {MAX_GPUS} per container"
    return ""


def _response(
    uid: str, *, allowed: bool, patch: list[dict[str, Any]] | None = None, message: str = ""
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if message:
        response["status"] = {"message": message}
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def policy_responder(pool: str = "training") -> Responder:
    def respond(review: Any) -> tuple[int, bytes]:
        if not isinstance(review, dict) or review.get("kind") != KIND:
            return 400, b"expected a PodDecorationReview"
        return 200, json.dumps(site_policy(review, pool)).encode()

    return respond


class PolicyServer:
    """A decorator server on a thread: `url`, `requests` (the bodies it received), `stop()`."""

    def __init__(
        self,
        respond: Responder,
        host: str = "127.0.0.1",
        port: int = 0,
        certfile: str | None = None,
        keyfile: str | None = None,
    ) -> None:
        self.respond = respond
        self.requests: list[Any] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        scheme = "http"
        if certfile:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(certfile, keyfile)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://{host}:{self._server.server_address[1]}/decorate"

    def start(self) -> PolicyServer:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_REQUEST_BYTES:
                    self._send(413, b"too large")
                    return
                try:
                    review = json.loads(self.rfile.read(length))
                except ValueError:
                    self._send(400, b"not JSON")
                    return
                with owner._lock:
                    owner.requests.append(review)
                self._send(*owner.respond(review))

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # A client that gave up (a deadline, a size limit) is not told anything more.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return Handler


def serve(respond: Responder | None = None, **options: Any) -> PolicyServer:
    """A started server (the site policy unless `respond` is given)."""
    return PolicyServer(respond or policy_responder(), **options).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--cert", help="serving certificate (PEM); without it: plain http")
    parser.add_argument("--key", help="its private key (PEM)")
    parser.add_argument("--pool", default="training", help="the node pool to send pods to")
    args = parser.parse_args()
    server = PolicyServer(policy_responder(args.pool), args.host, args.port, args.cert, args.key)
    print(f"site policy serving on {server.url}", flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
