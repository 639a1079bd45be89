"""The fault proxy's vocabulary: what a request is (as kube-apiserver classifies it), the
scripted rules, and the counters. No I/O."""

from __future__ import annotations

import fnmatch
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field

ACTIONS = ("status", "delay", "cut", "drop", "lose", "hang")
TRUE = ("1", "t", "T", "true", "TRUE", "True")
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


# --- what a request is --------------------------------------------------------------------------
@dataclass(frozen=True)
class RequestInfo:
    """The API server's view of a request: verb, resource (with subresource), namespace, name."""

    verb: str
    resource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def is_watch(self) -> bool:
        return self.verb == "watch"


def request_info(method: str, target: str) -> RequestInfo:
    """Classify ``method target`` as kube-apiserver's RequestInfo does (non-resource paths such
    as ``/readyz`` get resource ``""``)."""
    url = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(url.query)
    parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        parts = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        parts = parts[3:]
    else:
        return RequestInfo(method.lower())
    watch = query.get("watch", [""])[-1] in TRUE  # Go's strconv.ParseBool
    if parts[:1] == ["watch"]:
        watch, parts = True, parts[1:]
    namespace = ""
    if len(parts) >= 3 and parts[0] == "namespaces":
        namespace, parts = parts[1], parts[2:]
    if not parts:
        return RequestInfo(method.lower())
    resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    name = parts[1] if len(parts) > 1 else ""
    if parts[0] == "namespaces" and name:
        namespace = name
    return RequestInfo(_verb(method, bool(name), watch), resource, namespace, name)


def _verb(method: str, named: bool, watch: bool) -> str:
    if method in ("GET", "HEAD"):
        return "watch" if watch else "get" if named else "list"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return VERBS.get(method, method.lower())


# --- the rules ----------------------------------------------------------------------------------
@dataclass
class Fault:
    """One scripted rule; see the module docstring for the actions. ``verb`` and ``resource`` are
    fnmatch patterns ("*": any); ``count`` None applies it to every matching request. ``seconds``
    None makes ``hang`` last until the client or the proxy gives up."""

    action: str
    verb: str = "*"
    resource: str = "*"
    count: int | None = 1
    code: int = 500
    retry_after: int | None = None
    seconds: float | None = 0.0
    after_events: int = 0
    applied: int = 0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"Fault.action must be one of {', '.join(ACTIONS)}: {self.action!r}")

    def matches(self, info: RequestInfo) -> bool:
        return fnmatch.fnmatchcase(info.verb, self.verb) and fnmatch.fnmatchcase(
            info.resource, self.resource
        )

    @property
    def spent(self) -> bool:
        return self.count is not None and self.applied >= self.count


@dataclass
class Stats:
    """What went through the proxy. Read the counters directly; they only grow."""

    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    namespaces: Counter[str] = field(default_factory=Counter)  # requests per namespace
    answers: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    #: (time.monotonic(), request, code) of every answer, in order
    answered: list[tuple[float, RequestInfo, int]] = field(default_factory=list)
    faults: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    total_watches: int = 0
    open_watches: int = 0
    watch_events: int = 0

    def by_verb(self) -> Counter[str]:
        totals: Counter[str] = Counter()
        for (verb, _), n in self.requests.items():
            totals[verb] += n
        return totals

    def count(self, verb: str = "*", resource: str = "*") -> int:
        """Requests whose verb and resource match these fnmatch patterns."""
        return sum(
            n
            for (v, r), n in list(self.requests.items())
            if fnmatch.fnmatchcase(v, verb) and fnmatch.fnmatchcase(r, resource)
        )
