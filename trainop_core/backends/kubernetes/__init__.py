"""The kubernetes backend: `TrainingClient(backend="kubernetes")` against a cluster.

Importing this package does not import `kubernetes`; building a `KubernetesBackend` does.
"""

from __future__ import annotations

from trainop_core.backends.kubernetes.backend import AmbiguousJobError, KubernetesBackend

__all__ = ["AmbiguousJobError", "KubernetesBackend"]
