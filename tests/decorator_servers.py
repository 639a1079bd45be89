"""Decorator servers for tests: the example site policy (examples/decorators/site_policy.py) over
real HTTP or HTTPS on loopback, and misbehaving ones (down, slow, garbage, huge, forbidden
patches) built on the same server class.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trainop_core.decorators.config import DecoratorConfig, ServerSettings
from trainop_core.operator.webhook.certs import new_ca, new_serving

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "decorators" / "site_policy.py"


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("site_policy", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


site_policy = _load_example()
POOL_LABEL: str = site_policy.POOL_LABEL
POOL_ENV: str = site_policy.POOL_ENV


@contextmanager
def policy_server(
    respond: Callable[[Any], tuple[int, bytes]] | None = None, tls: Path | None = None
) -> Iterator[Any]:
    """A started server (the site policy unless `respond`), HTTPS with a fresh CA when `tls` is a
    directory to write its files to (the CA's PEM is then `server.ca_pem`)."""
    options: dict[str, Any] = {}
    ca_pem = b""
    if tls is not None:
        ca = new_ca(_days(1))
        serving = new_serving(ca, ["127.0.0.1"], _days(1))
        (tls / "tls.crt").write_bytes(serving.cert_pem)
        (tls / "tls.key").write_bytes(serving.key_pem)
        options = {"certfile": str(tls / "tls.crt"), "keyfile": str(tls / "tls.key")}
        ca_pem = ca.cert_pem
    server = site_policy.serve(respond, **options)
    server.ca_pem = ca_pem
    try:
        yield server
    finally:
        server.stop()


def settings(server: Any, name: str = "site-policy", **overrides: Any) -> ServerSettings:
    """The ServerSettings of `server` (its CA as caBundle when it serves HTTPS)."""
    data: dict[str, Any] = {"name": name, "url": server.url, "timeoutSeconds": 2}
    if getattr(server, "ca_pem", b""):
        data["caBundle"] = base64.b64encode(server.ca_pem).decode()
    data.update(overrides)
    return ServerSettings.model_validate(data)


def config_of(*servers: ServerSettings, **fields: Any) -> DecoratorConfig:
    return DecoratorConfig(entry_points=False, servers=list(servers), **fields)


def config_file(directory: Path, server: Any, **fields: Any) -> Path:
    """A DecoratorConfiguration file: an in-process env SITE=lab, then `server` (with
    `fields`) as "site-policy"."""
    data = {
        "apiVersion": "trainop.kubeflow.org/v1alpha1",
        "kind": "DecoratorConfiguration",
        "entryPoints": False,
        "decorators": [{"env": {"SITE": "lab"}}],
        "servers": [{"name": "site-policy", "url": server.url, "timeoutSeconds": 2, **fields}],
    }
    path = directory / "decorators.yaml"
    path.write_text(json.dumps(data))
    return path


# --- misbehaviour -------------------------------------------------------------------------------
def answer(review: Any, **response: Any) -> tuple[int, bytes]:
    """A well-formed answer to `review` with `response`'s fields."""
    body = {
        "apiVersion": site_policy.API_VERSION,
        "kind": site_policy.KIND,
        "response": {"uid": review["request"]["uid"], **response},
    }
    return 200, json.dumps(body).encode()


def patching(ops: list[dict[str, Any]]) -> Callable[[Any], tuple[int, bytes]]:
    """A server answering every review with this JSON Patch."""
    encoded = base64.b64encode(json.dumps(ops).encode()).decode()
    return lambda review: answer(review, allowed=True, patchType="JSONPatch", patch=encoded)


def slow(seconds: float) -> Callable[[Any], tuple[int, bytes]]:
    release = threading.Event()

    def respond(review: Any) -> tuple[int, bytes]:
        release.wait(seconds)
        return site_policy.policy_responder()(review)

    return respond


def garbage(review: Any) -> tuple[int, bytes]:
    return 200, b"\x00\xffnot json at all"


def huge(review: Any) -> tuple[int, bytes]:
    return answer(review, allowed=True, status={"message": "x" * (2 * 1024 * 1024)})


def refusing(message: str) -> Callable[[Any], tuple[int, bytes]]:
    return lambda review: answer(review, allowed=False, status={"message": message})


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _days(n: int) -> Any:
    from datetime import timedelta

    return timedelta(days=n)
