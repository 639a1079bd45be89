"""/metrics behind the API server: the serving certificate (mounted, renewed, missing), the
reviews' caching, on the real control plane; the guard's answers and cache lifetimes with a
recorded client. (Who may read what, as the manifests' ServiceAccounts: tests/deploy/test_rbac.py.)
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from k8s import scrape
from opkit import Cluster, RunningOperator, wait_for

from trainop_core.operator.kube import ApiError
from trainop_core.operator.metrics_auth import (
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    ApiServerAuth,
    CertFiles,
)
from trainop_core.operator.webhook.certs import KeyPair, new_ca, new_serving
from trainop_core.private_files import write_new

YEAR = timedelta(days=365)


def write_pair(directory: Path, ca: KeyPair) -> None:
    """A serving certificate for 127.0.0.1 signed by `ca`, written as cert-manager writes it."""
    pair = new_serving(ca, ["127.0.0.1"], YEAR)
    for name, data in (("cert.pem", pair.cert_pem), ("key.pem", pair.key_pem)):
        (directory / name).unlink(missing_ok=True)
        write_new(directory / name, data)


def secure(cluster: Cluster, **overrides: Any) -> RunningOperator:
    return RunningOperator(
        cluster, metrics_bind_address="127.0.0.1:0", metrics_secure=True, **overrides
    )


def answered(port: int, ca: bytes, token: str) -> Callable[[], tuple[int, str] | None]:
    def attempt() -> tuple[int, str] | None:
        try:
            return scrape(port, ca, token)
        except OSError:  # not serving yet, or not this certificate yet
            return None

    return attempt


def test_a_mounted_certificate_is_served_and_a_renewed_one_from_the_next_connection(
    cluster: Cluster, tmp_path: Path
) -> None:
    first, second = new_ca(YEAR), new_ca(YEAR)
    write_pair(tmp_path, first)
    op = secure(
        cluster,
        metrics_cert_path=str(tmp_path),
        metrics_cert_name="cert.pem",
        metrics_cert_key="key.pem",
    )
    try:
        port, admin = op.manager.metrics_endpoint.port, cluster.control_plane.admin_token
        assert wait_for(answered(port, first.cert_pem, admin), 30, "served")[0] == 200
        write_pair(tmp_path, second)  # renewed in place
        assert wait_for(answered(port, second.cert_pem, admin), 30, "renewed")[0] == 200
        with pytest.raises(ssl.SSLCertVerificationError):
            scrape(port, first.cert_pem, admin)
    finally:
        op.stop()


def test_a_missing_certificate_fails_at_start_naming_the_file(
    cluster: Cluster, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=rf"metrics certificate {tmp_path}/tls\.crt"):
        secure(cluster, metrics_cert_path=str(tmp_path))


def test_scrapes_are_reviewed_once_then_answered_from_the_cache(cluster: Cluster) -> None:
    op = secure(cluster)
    try:
        port, ca = op.manager.metrics_endpoint.port, op.manager.metrics_endpoint.tls.cert_pem
        admin = cluster.control_plane.admin_token
        assert wait_for(answered(port, ca, admin), 30, "served")[0] == 200
        for _ in range(3):
            assert scrape(port, ca, admin)[0] == 200
        requests = cluster.proxy.stats.requests
        assert requests[("create", "tokenreviews")] == 1
        assert requests[("create", "subjectaccessreviews")] == 1
    finally:
        op.stop()


# --- the guard alone, with a recorded client ----------------------------------------------------
class Reviews:
    """Answers reviews as the API server would for one known token; records what was asked."""

    def __init__(self, token: str = "good", allowed: bool = True) -> None:
        self.token, self.allowed, self.asked = token, allowed, []
        self.fail: ApiError | None = None

    def create(self, res: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((res.plural, body["spec"]))
        if self.fail is not None:
            raise self.fail
        if res == TOKEN_REVIEWS:
            if body["spec"]["token"] != self.token:
                return {"status": {"authenticated": False}}
            user = {"username": "alice", "uid": "u1", "groups": ["g"], "extra": {"k": ["v"]}}
            return {"status": {"authenticated": True, "user": user}}
        assert res == SUBJECT_ACCESS_REVIEWS
        return {"status": {"allowed": self.allowed}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guard(reviews: Reviews, clock: Clock | None = None) -> ApiServerAuth:
    return ApiServerAuth(reviews, clock or Clock())  # type: ignore[arg-type]  # a recorded client


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("", (401, "Unauthorized")),
        ("Basic Z29vZA==", (401, "Unauthorized")),
        ("Bearer ", (401, "Unauthorized")),
        ("Bearer bad", (401, "Unauthorized")),
        ("Bearer good", None),
        ("bearer good", None),
    ],
    ids=[
        "no header is 401",
        "basic auth is 401",
        "an empty bearer token is 401",
        "a token the server does not vouch for is 401",
        "a good token passes",
        "the scheme is case-insensitive",
    ],
)
def test_the_guard_answers_401_unless_the_token_is_vouched_for(
    header: str, expected: tuple[int, str] | None
) -> None:
    assert guard(Reviews())("GET", "/metrics", header) == expected


def test_the_access_review_asks_for_the_user_and_the_non_resource_url() -> None:
    reviews = Reviews(allowed=False)
    assert guard(reviews)("GET", "/metrics", "Bearer good") == (
        403,
        "Authorization denied for user alice",
    )
    assert reviews.asked[1] == (
        "subjectaccessreviews",
        {
            "user": "alice",
            "uid": "u1",
            "groups": ["g"],
            "extra": {"k": ["v"]},
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    )


def test_a_failed_review_is_500_not_a_pass() -> None:
    reviews = Reviews()
    reviews.fail = ApiError(0, "TransportError", "connection refused")
    assert guard(reviews)("GET", "/metrics", "Bearer good") == (500, "Authentication failed")


@pytest.mark.parametrize(
    ("allowed", "kept", "asked_again_after"),
    [(True, 299.0, 301.0), (False, 29.0, 31.0)],
    ids=["an allowance is kept 5 minutes", "a denial is kept 30 seconds"],
)
def test_decisions_are_cached_as_controller_runtime_caches_them(
    allowed: bool, kept: float, asked_again_after: float
) -> None:
    reviews, clock = Reviews(allowed=allowed), Clock()
    check = guard(reviews, clock)
    start = clock.now

    def access_reviews() -> int:
        return sum(1 for plural, _ in reviews.asked if plural == "subjectaccessreviews")

    check("GET", "/metrics", "Bearer good")
    clock.now = start + kept
    check("GET", "/metrics", "Bearer good")
    assert access_reviews() == 1
    clock.now = start + asked_again_after
    check("GET", "/metrics", "Bearer good")
    assert access_reviews() == 2


def test_a_token_review_is_kept_a_minute_and_only_a_digest_of_the_token() -> None:
    reviews, clock = Reviews(), Clock()
    check = guard(reviews, clock)
    start = clock.now

    def token_reviews() -> int:
        return sum(1 for plural, _ in reviews.asked if plural == "tokenreviews")

    check("GET", "/metrics", "Bearer good")
    clock.now = start + 59
    check("GET", "/metrics", "Bearer good")
    assert token_reviews() == 1
    clock.now = start + 61
    check("GET", "/metrics", "Bearer good")
    assert token_reviews() == 2
    assert "good" not in repr(check._users._items)


def test_a_certificate_that_cannot_be_loaded_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(ValueError, match=r"tls\.crt"):
        CertFiles(str(tmp_path))
