"""Kueue next to the real control plane, for the suites in this directory (marked ``kueue``).

This directory gets its own control plane (the ``control_plane`` fixture is overridden here, one
per test module): Kueue's CRDs are served before kube-controller-manager starts (its garbage
collector then knows Workloads at once), and Kueue's webhooks and controllers never see the jobs
of the other suites. Kueue runs its Kubeflow v1 integrations and its TrainJob one, whose CRDs
(trainop's Trainer v2 CRDs) are served before it starts. Kueue is built on first use (minutes,
once per machine; see :mod:`trainop_core.testing.kueue`), so only a run that selects these tests
pays for it.

Fixtures: ``kueue`` (the running :class:`Kueue`), ``queues`` (a fresh ResourceFlavor,
ClusterQueue and LocalQueue for one test, see :class:`Queues`), plus the usual ``k8s`` ones.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from k8s import K8s
from kueuekit import Queues

from trainop_core.crds import all_crds
from trainop_core.kinds.table import build_registry
from trainop_core.runtimes.crds import trainer_crds
from trainop_core.testing.binaries import BinaryBuildError, kubernetes_binaries
from trainop_core.testing.builders import wait_for
from trainop_core.testing.controlplane import ControlPlane, ControlPlaneError
from trainop_core.testing.kueue import FRAMEWORKS, TRAINJOB, Kueue, kueue_binary, kueue_crds


@dataclass
class KueuePlane:
    control_plane: ControlPlane
    kueue: Kueue


@pytest.fixture(scope="session")
def kueue_binary_path() -> Path:
    started = time.monotonic()
    try:
        path = kueue_binary(build=True, log=lambda line: print(line, file=sys.stderr))
    except BinaryBuildError as exc:
        pytest.fail(f"Kueue could not be built:\n{exc}", pytrace=False)
    seconds = time.monotonic() - started
    if seconds > 5:
        print(f"Kueue built in {seconds:.0f} s", file=sys.stderr)
    return path


@pytest.fixture(scope="module")
def kueue_plane(kueue_binary_path: Path) -> Iterator[KueuePlane]:
    registry = build_registry(entry_points=False)
    try:
        cp = ControlPlane(
            binaries=kubernetes_binaries(build=False),
            crds=all_crds(registry.kinds) + kueue_crds() + trainer_crds(),
        ).start()
    except (BinaryBuildError, ControlPlaneError) as exc:
        pytest.fail(f"the real Kubernetes control plane did not start:\n{exc}", pytrace=False)
    try:
        frameworks = (*FRAMEWORKS, TRAINJOB)
        kueue = Kueue(cp, binary=kueue_binary_path, frameworks=frameworks).start()
    except BaseException:
        cp.stop()
        raise
    yield KueuePlane(cp, kueue)
    kueue.stop()
    cp.stop()


@pytest.fixture(scope="module")
def control_plane(kueue_plane: KueuePlane) -> ControlPlane:
    """This directory's control plane: the one Kueue runs next to."""
    return kueue_plane.control_plane


@pytest.fixture
def kueue(kueue_plane: KueuePlane, k8s: K8s) -> Kueue:
    """The running Kueue, its job webhooks enabled for this test's namespace."""
    kueue_plane.kueue.serve_namespace(k8s.namespace)
    return kueue_plane.kueue


@pytest.fixture
def queues(k8s: K8s, kueue: Kueue) -> Iterator[Queues]:
    """A 2-CPU ClusterQueue (StrictFIFO, lower priorities preemptible) and LocalQueue `team`."""
    made = Queues(k8s.rest, k8s.namespace, cpu="2").create()
    wait_for(made.active, timeout=60, interval=0.1)
    yield made
    made.delete()
