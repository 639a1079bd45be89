"""Certificates for the webhook server, as upstream's cert-controller makes them: a self-signed CA
(10 years) and a serving certificate it signs (1 year) for the webhook Service's DNS names (and
any IP addresses asked for), each renewed when less than a lookahead (90 days) is left.

Pure functions on PEM bytes (the `cryptography` package does the work; imported on first use).
A CA bundle may hold several CAs: after the CA is renewed the old one stays in the bundle until
it expires, so an API server that still has the old bundle keeps trusting the old serving
certificate, and one with the new bundle trusts both.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

CA_VALIDITY = timedelta(days=3650)
SERVING_VALIDITY = timedelta(days=365)
LOOKAHEAD = timedelta(days=90)
BACKDATE = timedelta(hours=1)  # tolerate clocks a little behind ours (as cert-controller)
CA_NAME = "trainop-webhook-ca"
ORGANIZATION = "trainop"
PEM_CERT = b"-----BEGIN CERTIFICATE-----"


@dataclass(frozen=True)
class Validity:
    """How long certificates live and how early they are renewed."""

    ca: timedelta = CA_VALIDITY
    serving: timedelta = SERVING_VALIDITY
    lookahead: timedelta = LOOKAHEAD


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


def new_ca(validity: timedelta, now: datetime | None = None) -> KeyPair:
    """A fresh self-signed CA."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    now = now or datetime.now(timezone.utc)
    key = _new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
        ]
    )
    builder = (
        _builder(name, name, key.public_key(), now, validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
    )
    return KeyPair(_pem(builder.sign(key, _hash())), _key_pem(key))


def new_serving(ca: KeyPair, hosts: Sequence[str], validity: timedelta, now: Any = None) -> KeyPair:
    """A serving certificate for `hosts` (DNS names or IP addresses) signed by `ca`."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = now or datetime.now(timezone.utc)
    ca_cert, ca_key = _load_cert(split_bundle(ca.cert_pem)[0]), _load_key(ca.key_pem)
    key = _new_key()
    # The names that count are the SANs; a common name may only hold 64 characters.
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])])
    builder = (
        _builder(subject, ca_cert.subject, key.public_key(), now, validity)
        .add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    )
    return KeyPair(_pem(builder.sign(ca_key, _hash())), _key_pem(key))


def split_bundle(bundle: bytes) -> list[bytes]:
    """The PEM certificates of a bundle, in order."""
    parts = bundle.split(PEM_CERT)
    return [PEM_CERT + part.rstrip() + b"\n" for part in parts[1:]]


def valid_ca(ca: KeyPair, now: datetime, lookahead: timedelta) -> bool:
    """Is `ca` (its first certificate) a CA, matching its key, not due for renewal?"""
    try:
        cert = _load_cert(split_bundle(ca.cert_pem)[0])
        key = _load_key(ca.key_pem)
    except Exception:  # missing, unparsable, an unsupported key: renew
        return False
    return _same_key(cert, key) and cert.not_valid_after_utc - lookahead > now


def valid_serving(
    serving: KeyPair, ca_pem: bytes, hosts: Sequence[str], now: datetime, lookahead: timedelta
) -> bool:
    """Is `serving` signed by the CA (first of `ca_pem`), for every one of `hosts`, matching its
    key, and not due for renewal?"""
    from cryptography import x509

    try:
        cert, key = _load_cert(serving.cert_pem), _load_key(serving.key_pem)
        ca = _load_cert(split_bundle(ca_pem)[0])
        cert.verify_directly_issued_by(ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except Exception:  # unparsable, wrong issuer, bad signature, no SAN: renew
        return False
    covered = {str(n) for n in names.get_values_for_type(x509.DNSName)}
    covered |= {str(n) for n in names.get_values_for_type(x509.IPAddress)}
    fresh = cert.not_valid_after_utc - lookahead > now
    return _same_key(cert, key) and fresh and all(_normal(h) in covered for h in hosts)


def bundle_with(new_ca_pem: bytes, old_bundle: bytes, now: datetime) -> bytes:
    """`new_ca_pem` first, then every other CA of `old_bundle` that has not expired yet."""
    kept = [new_ca_pem]
    for pem in split_bundle(old_bundle):
        try:
            expired = _load_cert(pem).not_valid_after_utc <= now
        except ValueError:
            continue
        if not expired and pem.strip() != new_ca_pem.strip():
            kept.append(pem)
    return b"".join(kept)


def not_after(cert_pem: bytes) -> datetime:
    when: datetime = _load_cert(split_bundle(cert_pem)[0]).not_valid_after_utc
    return when


# --- cryptography helpers ----------------------------------------------------------------------
def _new_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _hash() -> Any:
    from cryptography.hazmat.primitives import hashes

    return hashes.SHA256()


def _builder(subject: Any, issuer: Any, public_key: Any, now: datetime, validity: timedelta) -> Any:
    from cryptography import x509

    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
    )


def _usage(*, cert_sign: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not cert_sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _alt_names(hosts: Sequence[str]) -> list[Any]:
    from cryptography import x509

    names: list[Any] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _normal(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _same_key(cert: Any, key: Any) -> bool:
    from cryptography.hazmat.primitives import serialization

    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    mine = key.public_key().public_bytes(der, spki)
    return bool(cert.public_key().public_bytes(der, spki) == mine)


def _pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    data: bytes = cert.public_bytes(serialization.Encoding.PEM)
    return data


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    data: bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return data


def _load_cert(pem: bytes) -> Any:
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem)


def _load_key(pem: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization

    return serialization.load_pem_private_key(pem, password=None)
