"""Turning a request path into what it addresses, the way ``RequestInfoFactory`` does."""

from __future__ import annotations

from dataclasses import dataclass

from . import errors

NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
TRUE = frozenset({"1", "true", "True"})


@dataclass(frozen=True)
class Target:
    """A resource request path.

    ``/api[s]/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<subresource>]]``
    """

    group: str
    version: str
    namespace: str | None
    plural: str
    name: str
    subresource: str | None
    watch_prefix: bool

    @property
    def label(self) -> str:
        """``plural`` or ``plural/subresource``, as fault rules and counters name it."""
        return f"{self.plural}/{self.subresource}" if self.subresource else self.plural


def parse_target(parts: list[str]) -> Target:
    """Parse path segments (after splitting on "/"); raise 404 for anything else."""
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise _not_found()
    watch_prefix = bool(rest) and rest[0] == "watch"
    if watch_prefix:
        rest = rest[1:]
    namespace = None
    if len(rest) > 2 and rest[0] == "namespaces" and rest[2] not in NAMESPACE_SUBRESOURCES:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise _not_found()
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else None
    return Target(group, version, namespace, rest[0], name, sub, watch_prefix)


def verb_for(method: str, target: Target, params: dict[str, str]) -> str:
    """The Kubernetes verb of a request (405 for a method the path does not allow)."""
    if method == "GET":
        if target.name:
            return "get"
        return "watch" if target.watch_prefix or params.get("watch") in TRUE else "list"
    if method == "POST" and not target.name:
        return "create"
    if method == "PUT" and target.name:
        return "update"
    if method == "PATCH" and target.name:
        return "patch"
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    raise errors.method_not_allowed()


def _not_found() -> errors.ApiError:
    return errors.ApiError(404, "NotFound", "the server could not find the requested resource")
