"""Pod decorators: how a site changes the pods of every job without changing trainop.

Two ways, configured together in one `DecoratorConfiguration` (see `config`):

- in-process decorators (`PodDecorator`: installed `trainop.pod_decorators` entry points and the
  built-in `NodeSelector`, `Tolerations`, `Env`, `Sidecar`), run by the pure planner;
- decorator servers (`review` is the protocol), called by each backend's effects layer through
  `Decoration` just before it creates pods.

Importing this package loads neither jsonpatch nor anything that talks to a network.
"""

from trainop_core.decorators.builtin import (
    ENTRY_POINT_GROUP,
    Env,
    NodeSelector,
    PodDecorator,
    Sidecar,
    Tolerations,
    build_pod_decorators,
)
from trainop_core.decorators.config import (
    DecoratorConfig,
    FailurePolicy,
    ServerSettings,
    load_decorator_config,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "DecoratorConfig",
    "Env",
    "FailurePolicy",
    "NodeSelector",
    "PodDecorator",
    "ServerSettings",
    "Sidecar",
    "Tolerations",
    "build_pod_decorators",
    "load_decorator_config",
]
