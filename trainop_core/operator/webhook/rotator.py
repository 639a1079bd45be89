"""The webhook's certificates, managed by the operator itself as upstream's cert-controller does.

Every `check_period` (a minute; at start, then every few seconds until it succeeds, and sooner
while a configuration is missing), `SelfManaged`:

1. reads the Secret (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`), creating it when it is missing;
2. renews what is due: the CA when less than the lookahead is left of it (the old CA stays in
   `ca.crt`, after the new one, until it expires), the serving certificate when it is due, was
   not signed by the current CA or does not name every host. A pass that renews the CA keeps a
   serving certificate the old CA signed until the next pass, so that by the time a certificate
   of the new CA is served, the API server has had a whole period to learn the new bundle;
3. writes the Secret when it changed, guarded by its resourceVersion: when two replicas race,
   one wins and the other stops this pass and takes the winner's certificates on the next one;
4. writes the CA bundle into the `caBundle` of every webhook of the validating and mutating
   configurations (those that exist);
5. serves the Secret's certificate; the first pass that gets here makes the webhooks ready.

Every replica runs it (as cert-controller without RequireLeaderElection), so each serves the
current certificate. `External` serves what cert-manager (or anyone) writes into a directory
instead, re-read when it changes; cert-manager's CA injector then fills the caBundle.
"""

from __future__ import annotations

import base64
import logging
import os
import stat
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from trainop_core.operator.kube import ApiError, KubeClient, Obj, Resource
from trainop_core.operator.webhook.certs import (
    KeyPair,
    Validity,
    bundle_with,
    new_ca,
    new_serving,
    valid_ca,
    valid_serving,
)
from trainop_core.operator.webhook.options import in_cluster

log = logging.getLogger(__name__)
SECRETS = Resource("", "v1", "secrets", "Secret")
VALIDATING = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration", namespaced=False,
)  # fmt: skip
MUTATING = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration", namespaced=False,
)  # fmt: skip
RETRY_SECONDS = 2.0
MISSING_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # while a configuration does not exist yet
CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
Serve = Callable[[bytes, bytes], None]


class SelfManaged:
    """The certificate loop of one replica (see the module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        secret: str,
        hosts: tuple[str, ...],
        configurations: tuple[tuple[Resource, str], ...],
        validity: Validity,
        serve: Serve,
        check_period: float,
    ) -> None:
        self.client, self.namespace, self.secret = client, namespace, secret
        self.hosts, self.configurations = hosts, configurations
        self.validity, self.serve, self.check_period = validity, serve, check_period
        self.served: bytes = b""  # the serving certificate in use
        self.ready = threading.Event()
        self.missing = 0  # passes in a row that found a configuration missing
        self._reported: set[tuple[str, str]] = set()  # (kind, name) said to be missing, once

    def run(self, stop: threading.Event) -> None:
        """Check until `stop`, every `check_period` (a configuration re-applied without its
        caBundle, a Secret another replica renewed: cert-controller watches them, this polls),
        sooner while a configuration is missing (kubectl applies webhook configurations after
        the Deployment)."""
        while not stop.is_set():
            try:
                self.check()
            except Exception as exc:  # API errors, lost races, bad data: the loop must go on
                log.warning("webhook certificates: %s (trying again)", exc)
                stop.wait(RETRY_SECONDS)
                continue
            if self.missing:
                stop.wait(MISSING_BACKOFF[min(self.missing, len(MISSING_BACKOFF)) - 1])
            else:
                stop.wait(self.check_period)

    def check(self) -> None:
        """One pass: steps 1 to 5 of the module docstring. Raises ApiError on a failed call."""
        secret = self._read_secret()
        data = _decoded(secret)
        now = datetime.now(timezone.utc)
        ca = KeyPair(data.get(CA_CERT, b""), data.get(CA_KEY, b""))
        signer = ca.cert_pem  # the CA the serving certificate must come from, this pass
        renewed = dict(data)
        if not valid_ca(ca, now, self.validity.lookahead):
            fresh = new_ca(self.validity.ca, now)
            old = ca
            ca = KeyPair(bundle_with(fresh.cert_pem, old.cert_pem, now), fresh.key_pem)
            renewed.update({CA_CERT: ca.cert_pem, CA_KEY: ca.key_pem})
            # The old CA's serving certificate stays for this pass, if the old CA still lives.
            signer = old.cert_pem if valid_ca(old, now, timedelta(0)) else ca.cert_pem
        serving = KeyPair(renewed.get(TLS_CERT, b""), renewed.get(TLS_KEY, b""))
        if not valid_serving(serving, signer, self.hosts, now, self.validity.lookahead):
            serving = new_serving(ca, self.hosts, self.validity.serving, now)
            renewed.update({TLS_CERT: serving.cert_pem, TLS_KEY: serving.key_pem})
        if renewed != data:
            self._write_secret(secret, renewed)
            log.info("webhook certificates renewed in secret %s/%s", self.namespace, self.secret)
        self._inject(ca.cert_pem)
        if serving.cert_pem != self.served:
            self.serve(serving.cert_pem, serving.key_pem)
            self.served = serving.cert_pem
        self.ready.set()

    # --- the Secret ------------------------------------------------------------------------------
    def _read_secret(self) -> Obj:
        try:
            return self.client.get(SECRETS, self.namespace, self.secret)
        except ApiError as exc:
            if not exc.not_found:
                raise
        meta = {"name": self.secret, "namespace": self.namespace}
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta}
        try:
            return self.client.create(SECRETS, self.namespace, body)
        except ApiError as exc:
            if exc.already_exists or exc.answer_lost:  # another replica was first, or we were
                return self.client.get(SECRETS, self.namespace, self.secret)
            raise

    def _write_secret(self, secret: Obj, data: dict[str, bytes]) -> None:
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        body = dict(secret, data=encoded)  # carries its resourceVersion: a lost race is a 409
        try:
            self.client.replace(SECRETS, self.namespace, self.secret, body)
        except ApiError as exc:
            if exc.conflict:
                raise ValueError("another replica renewed the certificates first") from exc
            raise

    # --- the webhook configurations --------------------------------------------------------------
    def _inject(self, bundle: bytes) -> None:
        """Write `bundle` into each configuration's webhooks (those that exist)."""
        encoded = base64.b64encode(bundle).decode()
        missing = False
        for resource, name in self.configurations:
            configuration = (resource.kind, name)
            try:
                current = self.client.get(resource, "", name)
            except ApiError as exc:
                if exc.not_found:
                    # once at INFO, then DEBUG: an operator run without its webhook
                    # configurations (a benchmark, a test cluster) would say it every minute
                    level = logging.DEBUG if configuration in self._reported else logging.INFO
                    log.log(level, "no %s %s yet: its caBundle waits", *configuration)
                    self._reported.add(configuration)
                    missing = True
                    continue
                raise
            if configuration in self._reported:
                self._reported.discard(configuration)
                log.info("%s %s is there: writing its caBundle", *configuration)
            webhooks = current.get("webhooks") or []
            if all((w.get("clientConfig") or {}).get("caBundle") == encoded for w in webhooks):
                continue
            for webhook in webhooks:
                webhook.setdefault("clientConfig", {})["caBundle"] = encoded
            try:
                self.client.replace(resource, "", name, current)
            except ApiError as exc:
                if not exc.conflict:
                    raise
                raise ValueError(f"{resource.kind} {name} changed meanwhile") from exc
        self.missing = self.missing + 1 if missing else 0


class External:
    """Serve the certificate someone else writes into `cert_dir` (tls.crt, tls.key), re-read
    whenever it changes (cert-manager rewrites the mounted Secret before it expires)."""

    def __init__(self, cert_dir: str, serve: Serve, check_period: float) -> None:
        self.dir, self.serve = Path(cert_dir), serve
        self.check_period = min(check_period, 10.0)
        self.served: tuple[bytes, bytes] = (b"", b"")
        self.ready = threading.Event()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.check()
            except (OSError, ValueError) as exc:
                log.warning("webhook certificate in %s: %s", self.dir, exc)
            stop.wait(self.check_period if self.ready.is_set() else RETRY_SECONDS)

    def check(self) -> None:
        if not in_cluster():  # a pod's mounted Secret is its own; elsewhere check who may plant
            private_enough(self.dir)
        pair = ((self.dir / TLS_CERT).read_bytes(), (self.dir / TLS_KEY).read_bytes())
        if pair != self.served:
            self.serve(*pair)
            self.served = pair
        self.ready.set()


def private_enough(directory: Path) -> None:
    """ValueError unless `directory` and the certificate files in it are this user's (or
    root's) and no other user may write them: a certificate another local user could plant is
    never served (as ssh refuses a key file others may write)."""
    me = os.getuid()
    for path in (directory, directory / TLS_CERT, directory / TLS_KEY):
        status = path.stat()  # the files may be links, as in a mounted Secret: their targets
        if status.st_uid not in (me, 0):
            raise ValueError(f"{path} is owned by uid {status.st_uid}, not by this user: refused")
        if status.st_mode & 0o022:
            mode = oct(stat.S_IMODE(status.st_mode))
            raise ValueError(
                f"{path} may be written by other users (mode {mode}): refused; "
                "make it private (chmod go-w, or a directory of mode 700)"
            )


def _decoded(secret: Obj) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value)
        except (ValueError, TypeError):
            continue  # damaged: renewed as if missing
    return out
