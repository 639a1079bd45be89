"""The local backend: replicas as real processes, state under `$TRAINOP_HOME` (`~/.trainop`)."""

from trainop_core.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
