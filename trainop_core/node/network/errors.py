"""The two ways per-pod networking fails."""

from __future__ import annotations


class NetworkError(RuntimeError):
    """A namespace, link or address could not be made or removed (the message quotes the tool)."""


class NetworkUnavailable(NetworkError):
    """This machine or process cannot give pods networks of their own; the message says why. The
    caller may fall back to the host's network (pods then share 127.0.0.1) and should say so."""
