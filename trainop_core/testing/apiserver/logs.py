"""Pod log text kept by the fake server, with follow support.

Logs are keyed by ``(namespace, pod, container)``. Writers call :meth:`PodLogs.append`;
followers block in :meth:`PodLogs.wait_beyond` until text past their offset arrives.
"""

from __future__ import annotations

import threading


def tail(text: str, lines: int | None) -> str:
    """The last ``lines`` lines of ``text`` (all of it when ``lines`` is None)."""
    if lines is None:
        return text
    if lines <= 0:
        return ""
    kept = text.splitlines(keepends=True)[-lines:]
    return "".join(kept)


class PodLogs:
    """Thread-safe log text per container."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._text: dict[tuple[str, str, str], str] = {}

    def set(self, namespace: str, pod: str, container: str, text: str) -> None:
        with self._cond:
            self._text[(namespace, pod, container)] = text
            self._cond.notify_all()

    def append(self, namespace: str, pod: str, container: str, text: str) -> None:
        with self._cond:
            key = (namespace, pod, container)
            self._text[key] = self._text.get(key, "") + text
            self._cond.notify_all()

    def read(self, namespace: str, pod: str, container: str) -> str:
        with self._cond:
            return self._text.get((namespace, pod, container), "")

    def wait_beyond(
        self, namespace: str, pod: str, container: str, offset: int, timeout: float
    ) -> str:
        """Text after ``offset`` once there is some, or "" after ``timeout`` seconds."""
        key = (namespace, pod, container)
        with self._cond:
            self._cond.wait_for(lambda: len(self._text.get(key, "")) > offset, timeout)
            return self._text.get(key, "")[offset:]

    def drop(self, namespace: str, pod: str) -> None:
        with self._cond:
            for key in [k for k in self._text if k[:2] == (namespace, pod)]:
                del self._text[key]
            self._cond.notify_all()
