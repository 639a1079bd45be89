"""The one table of built-in kinds, and the registry built from it (plus `trainop.kinds` plugins).

Registries are built by a function, fresh each call: no import-time side effects, one per manager
or test. Third-party kinds join through the `trainop.kinds` entry-point group, each entry point
resolving to a `Kind`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points as installed_entry_points

from trainop_core.kinds import jax, mpi, mxnet, paddle, pytorch, tensorflow, xgboost
from trainop_core.kinds.base import Kind

ENTRY_POINT_GROUP = "trainop.kinds"


def builtin_kinds() -> tuple[Kind, ...]:
    """Every kind trainop ships, in upstream's `--enable-scheme` order."""
    return (
        tensorflow.KIND,
        pytorch.KIND,
        mxnet.KIND,
        xgboost.KIND,
        jax.KIND,  # the fifth kind: its module plus this line
        paddle.KIND,
        mpi.KIND,
    )


def _names(kind: Kind) -> tuple[str, ...]:
    return (kind.kind.lower(), *(alias.lower() for alias in kind.aliases))


@dataclass(frozen=True)
class KindRegistry:
    """The kinds one manager, client or test works with. Immutable; `select` makes a smaller one."""

    kinds: tuple[Kind, ...]

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for kind in self.kinds:
            for name in (*_names(kind), kind.plural):
                if name in seen:
                    raise ValueError(
                        f"kind name {name!r} is claimed by {seen[name]} and {kind.kind}"
                    )
                seen[name] = kind.kind

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(kind.kind for kind in self.kinds)

    def get(self, name: str) -> Kind:
        """The kind called `name` (case-insensitive; aliases such as MXNetJob accepted)."""
        wanted = name.lower()
        for kind in self.kinds:
            if wanted in _names(kind):
                return kind
        raise KeyError(f"unknown kind {name!r}; known kinds: {', '.join(self.names)}")

    def for_plural(self, plural: str) -> Kind:
        """The kind whose resource plural (tfjobs, pytorchjobs, ...) is `plural`."""
        for kind in self.kinds:
            if kind.plural == plural.lower():
                return kind
        known = ", ".join(kind.plural for kind in self.kinds)
        raise KeyError(f"unknown resource {plural!r}; known resources: {known}")

    def select(self, names: Sequence[str]) -> KindRegistry:
        """Only the named kinds (`--enable-scheme`); no names means all of them."""
        if not names:
            return self
        unknown = [n for n in names if not any(n.lower() in _names(k) for k in self.kinds)]
        if unknown:
            raise ValueError(
                f"unknown kind(s) {', '.join(unknown)}; known kinds: {', '.join(self.names)}"
            )
        chosen = {self.get(n).kind for n in names}
        return KindRegistry(tuple(k for k in self.kinds if k.kind in chosen))

    def select_none(self) -> KindRegistry:
        """No kinds (an operator that runs only TrainJobs, which are not a v1 kind)."""
        return KindRegistry(())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and any(name.lower() in _names(k) for k in self.kinds)

    def __iter__(self) -> Iterator[Kind]:
        return iter(self.kinds)


def _plugin_kinds() -> list[Kind]:
    kinds = []
    for point in installed_entry_points(group=ENTRY_POINT_GROUP):
        loaded = point.load()
        if not isinstance(loaded, Kind):
            raise TypeError(f"entry point {point.name!r} in {ENTRY_POINT_GROUP} is not a Kind")
        kinds.append(loaded)
    return kinds


def build_registry(*, entry_points: bool = True, extra: Sequence[Kind] = ()) -> KindRegistry:
    """A fresh registry: the built-in table, then installed plugins, then `extra`."""
    plugins = _plugin_kinds() if entry_points else []
    return KindRegistry((*builtin_kinds(), *plugins, *extra))
