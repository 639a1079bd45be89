"""What a job name, a namespace and a replica name may be: checked on every path, reads included.

Creation checks the stricter webhook rules (`api/validation.py`: a job name is a DNS-1035 label
of at most 63 characters). Looking a job up accepts anything the Kubernetes API server itself would
store (a name is a DNS-1123 subdomain, a namespace a DNS-1123 label), and nothing else: no "/",
no "..", nothing that could name a path or URL outside the store being asked.
"""

from __future__ import annotations

import re
from typing import Any

from trainop_core.api.podtemplate import describe
from trainop_core.errors import InvalidNameError

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAMESPACE = re.compile(rf"^{_LABEL}$")
_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_REPLICA = re.compile(rf"^{_LABEL}-[0-9]+$")
MAX_NAMESPACE = 63
MAX_NAME = 253


def is_namespace(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAMESPACE and bool(_NAMESPACE.match(value))


def is_job_name(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME and bool(_NAME.match(value))


def is_replica(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME and bool(_REPLICA.match(value))


def check_namespace(namespace: Any) -> None:
    """InvalidNameError unless `namespace` is a DNS-1123 label."""
    if not is_namespace(namespace):
        raise InvalidNameError(
            f"namespace {describe(namespace)} is not valid: a namespace is at most 63 lowercase "
            "letters, digits and '-', starting and ending with a letter or digit"
        )


def check_job_ref(name: Any, namespace: Any) -> None:
    """InvalidNameError unless namespace/name could name a stored job."""
    check_namespace(namespace)
    if not is_job_name(name):
        raise InvalidNameError(
            f"job name {describe(name)} is not valid: a name is lowercase letters, digits, '-' "
            "and '.', starting and ending with a letter or digit"
        )


def check_replica(replica: Any) -> None:
    """InvalidNameError unless `replica` looks like a replica id such as "worker-1"."""
    if not is_replica(replica):
        raise InvalidNameError(
            f"replica {describe(replica)} is not valid: a replica is named like master-0 or "
            "worker-1"
        )
