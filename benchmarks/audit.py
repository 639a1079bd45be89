"""Count API requests from kube-apiserver's audit log: per user (and user agent), verb and resource.

The benchmark starts kube-apiserver with :func:`audit_flags`: every request is logged once at level
Metadata when its response is complete (long-running watches also when their response starts), as
JSON lines. The server writes what it served, so the counts do not depend on what a client says
about itself, and each operator is told apart by its own ServiceAccount.

:class:`AuditLog` reads the file incrementally: :meth:`AuditLog.mark` starts a new window (e.g.
after warm-up) and :meth:`AuditLog.window` counts the requests made since then.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""


def audit_flags(directory: Path) -> list[str]:
    """kube-apiserver flags that log every request to ``directory/audit.log``."""
    policy = directory / "audit-policy.yaml"
    policy.write_text(POLICY)
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={directory / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",  # never rotate: the reader follows one file
        "--audit-log-mode=blocking",
    ]


@dataclass
class Requests:
    """Requests of one identity: "verb resource[/subresource]" -> count, and its watches."""

    by_verb_resource: Counter[str] = field(default_factory=Counter)
    watches_opened: int = 0
    watches_open: int = 0  # at the end of the window (opened and not yet ended, ever)
    watches_open_peak: int = 0
    watch_resources: Counter[str] = field(default_factory=Counter)  # open at the end, by resource

    @property
    def total(self) -> int:
        return sum(self.by_verb_resource.values())

    def by_verb(self) -> dict[str, int]:
        verbs: Counter[str] = Counter()
        for key, n in self.by_verb_resource.items():
            verbs[key.split(" ", 1)[0]] += n
        return dict(sorted(verbs.items()))


class AuditLog:
    """Follows one audit log file. Not thread-safe (one reader)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._open: Counter[tuple[str, str]] = Counter()  # (user, resource) watches open now
        self._window: dict[str, Requests] = {}

    def mark(self) -> None:
        """Read everything logged so far and start a new window of counts."""
        self._read()
        self._window = {}

    def window(self) -> dict[str, Requests]:
        """user -> its requests since the last mark (watches open: since the server started)."""
        self._read()
        for (user, resource), n in self._open.items():
            if n > 0:
                requests = self._requests(user)
                requests.watches_open += n
                requests.watch_resources[resource] += n
        return self._window

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def _requests(self, user: str) -> Requests:
        return self._window.setdefault(user, Requests())

    def _read(self) -> None:
        if not self.path.exists():
            return
        for requests in self._window.values():  # recomputed by window()
            requests.watches_open = 0
            requests.watch_resources.clear()
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            while True:
                line = handle.readline()
                if not line.endswith(b"\n"):  # half-written: read it next time
                    break
                self._offset += len(line)
                self._count(json.loads(line))

    def _count(self, event: dict[str, object]) -> None:
        user = identity(event)
        verb, stage = str(event.get("verb", "")), event.get("stage")
        resource = resource_of(event)
        if verb == "watch":
            key = (user, resource)
            if stage == "ResponseStarted":
                self._open[key] += 1
                requests = self._requests(user)
                requests.watches_opened += 1
                requests.by_verb_resource[f"watch {resource}"] += 1
                now_open = sum(n for (u, _), n in self._open.items() if u == user)
                requests.watches_open_peak = max(requests.watches_open_peak, now_open)
            elif stage == "ResponseComplete" and self._open[key] > 0:
                self._open[key] -= 1
            return
        if stage == "ResponseComplete":
            self._requests(user).by_verb_resource[f"{verb} {resource}"] += 1


def identity(event: dict[str, object]) -> str:
    """The user name, or "<user> (<agent>)" for the admin, whom several test clients share."""
    user = event.get("user") or {}
    name = str(user.get("username", "")) if isinstance(user, dict) else ""
    if name.startswith("system:serviceaccount:"):
        return name
    agent = str(event.get("userAgent", "")).split("/", 1)[0].split(" ", 1)[0]
    return f"{name} ({agent})" if agent else name


def resource_of(event: dict[str, object]) -> str:
    ref = event.get("objectRef") or {}
    if not isinstance(ref, dict) or not ref.get("resource"):
        return "(non-resource)"
    resource = str(ref["resource"])
    if ref.get("subresource"):
        resource += f"/{ref['subresource']}"
    return resource
