"""Where training runtimes come from: the defaults trainop ships, a directory, or a cluster's cache.

A `RuntimeCatalog` answers a TrainJob's `runtimeRef` as Trainer does: ClusterTrainingRuntimes by
name, TrainingRuntimes by name in the TrainJob's own namespace.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainop_core.api import trainjob as v2
from trainop_core.api.load import YAML_SUFFIXES
from trainop_core.api.trainjob_validation import load_v2
from trainop_core.errors import InvalidJobError, Problem

DEFAULTS_DIR = Path(__file__).parent / "defaults"
RUNTIMES_ENV = "TRAINOP_RUNTIMES"  # a directory of runtime YAML files, used when none is named


class RuntimeNotFoundError(InvalidJobError):
    """The runtime a TrainJob names is not there (yet: on a cluster it may be applied later)."""


@dataclass(frozen=True)
class RuntimeCatalog:
    runtimes: tuple[v2.TrainingRuntime, ...]

    def find(self, ref: v2.RuntimeRef, namespace: str) -> v2.TrainingRuntime:
        """The runtime `ref` names for a TrainJob in `namespace`; InvalidJobError if none."""
        kind = ref.kind or v2.CLUSTER_TRAINING_RUNTIME
        for runtime in self.runtimes:
            if (
                runtime.kind == kind
                and runtime.name == ref.name
                and self._visible(runtime, namespace)
            ):
                return runtime
        known = ", ".join(sorted(r.name for r in self.runtimes if r.kind == kind)) or "none"
        message = f'no {kind} named "{ref.name}" (known: {known})'
        raise RuntimeNotFoundError([Problem("spec.runtimeRef.name", message)])

    @staticmethod
    def _visible(runtime: v2.TrainingRuntime, namespace: str) -> bool:
        if runtime.kind == v2.CLUSTER_TRAINING_RUNTIME:
            return True
        return (runtime.metadata.namespace or "default") == namespace


def runtime_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        problem = Problem("", "not a directory of runtime YAML files")
        raise InvalidJobError([problem], source=str(directory))
    return sorted(p for p in directory.iterdir() if p.suffix in YAML_SUFFIXES and p.is_file())


def load_catalog(directories: Iterable[Path]) -> RuntimeCatalog:
    """Every runtime in the YAML files of `directories`; a TrainJob among them is an error."""
    runtimes: list[v2.TrainingRuntime] = []
    for directory in directories:
        for path in runtime_files(directory):
            for obj in load_v2(path):
                if not isinstance(obj, v2.TrainingRuntime):
                    message = (
                        f"expected a TrainingRuntime or ClusterTrainingRuntime, got {obj.kind}"
                    )
                    raise InvalidJobError([Problem("kind", message)], source=str(path))
                runtimes.append(obj)
    return RuntimeCatalog(tuple(runtimes))


def default_catalog() -> RuntimeCatalog:
    """The runtimes trainop ships (Trainer's defaults)."""
    return load_catalog([DEFAULTS_DIR])
