"""Backends by name, resolved lazily so that importing trainop_core imports no backend's SDK.

`build_backend_registry()` returns a fresh name -> factory table; a factory imports its module only
when called, so asking for "kubernetes" is the first moment the `kubernetes` package is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from trainop_core.backends.base import Backend, LogLine
from trainop_core.errors import TerminalError

__all__ = ["Backend", "BackendFactory", "LogLine", "build_backend_registry", "resolve_backend"]

BackendFactory = Callable[..., Backend]

# name -> "module:attribute" of a class or function taking the backend's keyword options.
_BUILTIN = {
    "local": "trainop_core.backends.local.backend:LocalBackend",
    "kubernetes": "trainop_core.backends.kubernetes.backend:KubernetesBackend",
    "ray": "trainop_core.backends.ray.backend:RayBackend",
}


def _lazy(target: str) -> BackendFactory:
    module_name, _, attribute = target.partition(":")

    def factory(**options: Any) -> Backend:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UnknownBackendError(
                f"backend {module_name.split('.')[-2]!r} is not available: {exc}"
            ) from exc
        backend: Backend = getattr(module, attribute)(**options)
        return backend

    return factory


class UnknownBackendError(TerminalError):
    """No backend of that name, or its module cannot be imported here."""


def build_backend_registry() -> dict[str, BackendFactory]:
    """A fresh table of the built-in backends (name -> factory)."""
    return {name: _lazy(target) for name, target in _BUILTIN.items()}


def resolve_backend(
    name: str, registry: Mapping[str, BackendFactory] | None = None, **options: Any
) -> Backend:
    """Build the backend called `name` with `options`; UnknownBackendError lists the known names."""
    table = build_backend_registry() if registry is None else registry
    factory = table.get(name)
    if factory is None:
        known = ", ".join(sorted(table))
        raise UnknownBackendError(f"unknown backend {name!r} (known backends: {known})")
    return factory(**options)
