"""The certificates between kube-apiserver and a process node's kubelet, as kubeadm lays them out.

Two certificate authorities, so that neither side can pose as the other:

- the **serving CA** signs each node's serving certificate (its SANs: the node's IP addresses and
  host names); kube-apiserver trusts it (``--kubelet-certificate-authority``) and so checks that it
  talks to the node it means;
- the **client CA** signs kube-apiserver's client certificate (CN ``kube-apiserver-kubelet-client``,
  ``--kubelet-client-certificate``/``--kubelet-client-key``); a node serves only a client presenting
  a certificate this CA signed (no authorization beyond that: whoever holds it is the API server).

Every key is written owner-only through :mod:`trainop_core.private_files`. ``cryptography`` (a
dependency of trainop already, for the webhook certificates) does the work::

    pki = KubeletPki.create(directory)                  # the CAs and the API server's client cert
    ControlPlane(kubelet_pki=pki)                       # kube-apiserver gets pki.apiserver_flags()
    cert, key = pki.node_serving("node-1", ["127.0.0.1", "node-1"])
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from trainop_core.private_files import private_dir, replace

VALIDITY = timedelta(days=365)
BACKDATE = timedelta(hours=1)  # tolerate a clock a little behind ours
APISERVER_CLIENT_CN = "kube-apiserver-kubelet-client"
SERVING_CA_NAME = "trainop-kubelet-serving-ca"
CLIENT_CA_NAME = "trainop-kubelet-client-ca"


@dataclass(frozen=True)
class KubeletPki:
    """The PKI's files under `directory` (mode 0700); see the module docstring."""

    directory: Path

    @classmethod
    def create(cls, directory: str | os.PathLike[str]) -> KubeletPki:
        """Make both CAs and kube-apiserver's client certificate under `directory` (created 0700
        if missing). Files already there are replaced."""
        pki = cls(private_dir(directory))
        for name, common_name in (("ca", SERVING_CA_NAME), ("client-ca", CLIENT_CA_NAME)):
            cert, key = _issue(common_name, ca=None, hosts=(), role="ca")
            pki._write(name, cert, key)
        client = _issue(APISERVER_CLIENT_CN, ca=pki._load("client-ca"), hosts=(), role="client")
        pki._write("apiserver-kubelet-client", *client)
        return pki

    # --- what kube-apiserver is given ------------------------------------------------------------
    @property
    def serving_ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def client_ca(self) -> Path:
        return self.directory / "client-ca.crt"

    @property
    def client_cert(self) -> Path:
        return self.directory / "apiserver-kubelet-client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "apiserver-kubelet-client.key"

    def apiserver_flags(self) -> list[str]:
        """kube-apiserver's flags for talking to the nodes' kubelets with these certificates."""
        return [
            f"--kubelet-client-certificate={self.client_cert}",
            f"--kubelet-client-key={self.client_key}",
            f"--kubelet-certificate-authority={self.serving_ca}",
        ]

    # --- what a node is given --------------------------------------------------------------------
    def node_serving(self, node: str, hosts: Sequence[str]) -> tuple[Path, Path]:
        """A serving certificate for node `node` valid for `hosts` (IP addresses or DNS names),
        signed by the serving CA; returns (certificate, key) paths. Idempotent per call: a new
        key each time."""
        if not hosts:
            raise ValueError("node_serving: hosts must name at least one IP address or host name")
        name = f"node-{_file_safe(node)}"
        self._write(name, *_issue(node, ca=self._load("ca"), hosts=hosts, role="server"))
        return self.directory / f"{name}.crt", self.directory / f"{name}.key"

    def server_context(self, cert: Path, key: Path) -> ssl.SSLContext:
        """A TLS server context presenting (`cert`, `key`) that REQUIRES a client certificate
        signed by the client CA: anyone else fails the handshake."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        context.load_verify_locations(cafile=self.client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self) -> ssl.SSLContext:
        """A TLS client context as kube-apiserver's (its client certificate, trusting the serving
        CA), for tests and tools that talk to a node directly."""
        context = ssl.create_default_context(cafile=str(self.serving_ca))
        context.load_cert_chain(self.client_cert, self.client_key)
        return context

    # --- files -----------------------------------------------------------------------------------
    def _write(self, name: str, cert_pem: bytes, key_pem: bytes) -> None:
        replace(self.directory / f"{name}.key", key_pem)
        replace(self.directory / f"{name}.crt", cert_pem)

    def _load(self, name: str) -> tuple[Any, Any]:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        cert = x509.load_pem_x509_certificate((self.directory / f"{name}.crt").read_bytes())
        key_pem = (self.directory / f"{name}.key").read_bytes()
        return cert, serialization.load_pem_private_key(key_pem, password=None)


def _file_safe(node: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-." else "_" for c in node)
    if not safe.strip("."):
        raise ValueError(f"node name {node!r} gives no usable file name")
    return safe[:200]


def _issue(
    common_name: str, *, ca: tuple[Any, Any] | None, hosts: Sequence[str], role: str
) -> tuple[bytes, bytes]:
    """A new EC key and its certificate: self-signed when `ca` is None, else signed by `ca`
    (certificate, key). `role` is "ca", "server" or "client" (its key usages)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    issuer_cert, issuer_key = ca if ca is not None else (None, key)
    now = datetime.now(timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
    )
    for extension, critical in _extensions(role, hosts):
        builder = builder.add_extension(extension, critical=critical)
    cert = builder.sign(issuer_key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _extensions(role: str, hosts: Sequence[str]) -> list[tuple[Any, bool]]:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    is_ca = role == "ca"
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=is_ca,
        crl_sign=is_ca,
        encipher_only=False,
        decipher_only=False,
    )
    extensions: list[tuple[Any, bool]] = [
        (x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None), True),
        (usage, True),
    ]
    if role == "server":
        extensions.append((x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False))
        extensions.append((x509.SubjectAlternativeName([_alt_name(h) for h in hosts]), False))
    elif role == "client":
        extensions.append((x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False))
    return extensions


def _alt_name(host: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
