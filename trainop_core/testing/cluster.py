"""``python -m trainop_core.testing.cluster``: try the operator with kubectl and no cluster.

Builds (or reuses) the binaries, starts a real kube-apiserver + etcd + kube-controller-manager +
kube-scheduler on 127.0.0.1, installs the CRDs (Kubeflow Trainer's too, with the
ClusterTrainingRuntimes trainop ships), starts ``--nodes`` process nodes (default 2:
:mod:`trainop_core.node`, kubelets that run every pod bound to them as processes of this machine),
runs the operator (every v1 kind and TrainJobs) in this process, writes an admin kubeconfig and
waits; Ctrl-C (or SIGTERM) stops everything and removes its data. Jobs really train: ``kubectl
apply -f examples/pytorch/ddp.yaml`` runs the example's processes, ``kubectl logs`` shows their
output.

The admin kubeconfig holds a token for everything: by default it goes to a new directory with a
random name (mode 0700) under the temporary directory, never to a name another local user could
guess and plant a link at; `--kubeconfig PATH` writes it atomically without following a link
there (see `trainop_core.private_files`).

No image is pulled: a container runs its ``command`` (``python`` is this interpreter), and the
examples' image (``ghcr.io/trainop/examples``) starts in a directory holding every example script.
``--stand-in`` starts the old rule-based kubelet stand-in instead of process nodes and no
scheduler: it binds every pod to one fake node and moves it through its phases by rule (each pod
"runs" for ``--pod-seconds`` and exits 0); nothing is executed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from trainop_core.node.pki import KubeletPki
from trainop_core.private_files import private_temp_dir

from .binaries import BinaryBuildError, kubernetes_binaries
from .controlplane import ControlPlane, ControlPlaneError
from .kubelet import Kubelet, Rule
from .nodes import ProcessNodes, example_roots

PROG = "python -m trainop_core.testing.cluster"
CLUSTER_RUNTIMES = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
#: How long a silent node stays Ready, and pods on it tolerate it being lost.
NODE_MONITOR_GRACE = 20.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "A local Kubernetes cluster: a real control plane (kube-apiserver, etcd, "
            "kube-controller-manager, kube-scheduler) with the trainop CRDs, the trainop "
            "operator and process nodes that run every pod's command as processes of this "
            "machine (no container runtime, no image pulls), for trying the operator with "
            "kubectl. Ctrl-C stops it."
        ),
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="where to write the admin kubeconfig (default: a new private directory under the "
        "temporary directory, removed at the end; the path is printed)",
    )
    parser.add_argument(
        "--nodes", type=_node_count, default=2, help="how many process nodes (default 2)"
    )
    parser.add_argument(
        "--stand-in",
        action="store_true",
        help="no process nodes or scheduler: the rule-based kubelet stand-in binds every pod to "
        "one fake node and moves it through its phases without running anything",
    )
    parser.add_argument(
        "--pod-seconds",
        type=float,
        default=10.0,
        help="with --stand-in: how long every pod 'runs' before it exits 0; negative: pods run "
        "until deleted",
    )
    parser.add_argument(
        "--no-operator",
        action="store_true",
        help="do not run the trainop operator (e.g. to run another operator against it)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    from trainop_core.crds import all_crds
    from trainop_core.kinds.table import build_registry

    registry = build_registry()
    pki_dir = private_temp_dir("trainop-kubelet-pki-")  # the nodes' and API server's certificates
    try:
        binaries = kubernetes_binaries(build=True)
        args.kubelet_pki = None if args.stand_in else KubeletPki.create(pki_dir)
        plane = ControlPlane(
            binaries=binaries,
            crds=all_crds(registry.kinds),
            scheduler=not args.stand_in,
            node_monitor_grace=None if args.stand_in else NODE_MONITOR_GRACE,
            kubelet_pki=args.kubelet_pki,
            service_accounts=not args.stand_in,  # in-cluster clients (MPI's kubectl exec)
        )
        with plane as cp:
            _serve(cp, registry, args, done)
    except (BinaryBuildError, ControlPlaneError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(pki_dir, ignore_errors=True)
    return 0


def _node_count(text: str) -> int:
    count = int(text)
    if not 1 <= count <= 16:
        raise argparse.ArgumentTypeError(f"--nodes must be between 1 and 16, not {count}")
    return count


def _serve(
    cp: ControlPlane, registry: Any, args: argparse.Namespace, done: threading.Event
) -> None:
    cp.ensure_namespace("kubeflow")  # where the examples put their jobs
    install_trainer(cp)
    with admin_kubeconfig(args.kubeconfig) as kubeconfig:
        cp.kubeconfig_for(cp.admin_token, kubeconfig, user="trainop-admin")
        with _nodes(cp, args) as nodes:
            manager, thread = (None, None) if args.no_operator else _start_operator(cp, registry)
            _print_help(cp, kubeconfig, nodes, operator=manager is not None)
            done.wait()
            print("stopping ...", file=sys.stderr, flush=True)
            if manager is not None and thread is not None:
                manager.shutdown()
                thread.join(15)


def _nodes(cp: ControlPlane, args: argparse.Namespace) -> contextlib.AbstractContextManager[str]:
    """The nodes for the block: process nodes, or the stand-in; yields a line describing them."""
    if args.stand_in:
        seconds = None if args.pod_seconds < 0 else args.pod_seconds
        return _stand_in(Kubelet(cp, [Rule("*", run_seconds=seconds)]))
    images = example_roots(cp.data_dir / "images" / "examples")
    return _process_nodes(cp, args.nodes, images, args.kubelet_pki.directory)


@contextlib.contextmanager
def _stand_in(kubelet: Kubelet) -> Iterator[str]:
    with kubelet:
        yield f"node {kubelet.node_name} (the kubelet stand-in: nothing runs)"


@contextlib.contextmanager
def _process_nodes(
    cp: ControlPlane, count: int, images: dict[str, str], pki: Path
) -> Iterator[str]:
    from trainop_core.node.network import ClusterNetwork, NetworkUnavailable

    network: ClusterNetwork | None = ClusterNetwork(cp.rest.connection)
    try:
        assert network is not None
        network.start()
        where = f"pods on network {network.pod_network}, cluster DNS at {network.dns_ip}"
    except NetworkUnavailable as exc:
        network, where = None, f"NO pod network ({exc}): pods share this machine's, 127.0.0.1"
    try:
        nodes = ProcessNodes(cp, count, images=images, network=network, kubelet_pki=pki)
        with nodes:
            yield (
                f"process nodes {', '.join(nodes.names)} and kube-scheduler (pods really run); "
                f"{where}"
            )
    finally:
        if network is not None:
            network.stop()


@contextlib.contextmanager
def admin_kubeconfig(given: Path | None) -> Iterator[Path]:
    """Where the admin kubeconfig goes for the block, removed after it: `given`, or a file in a
    new private directory with an unpredictable name (removed with it)."""
    where: Path | None = None
    if given is None:
        where = private_temp_dir("trainop-dev-cluster-")
        given = where / "kubeconfig"
    path = given
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if where is not None:
            shutil.rmtree(where, ignore_errors=True)


def install_trainer(cp: ControlPlane) -> None:
    """Kubeflow Trainer's CRDs and the ClusterTrainingRuntimes trainop ships, as
    ``trainop runtimes -o yaml | kubectl apply --server-side -f -`` installs them."""
    import yaml

    from trainop_core.runtimes.catalog import DEFAULTS_DIR, runtime_files
    from trainop_core.runtimes.crds import trainer_crds

    cp.install_crds(trainer_crds())
    for path in runtime_files(DEFAULTS_DIR):
        cp.rest.create(CLUSTER_RUNTIMES, yaml.safe_load(path.read_text()))


def _start_operator(cp: ControlPlane, registry: Any) -> tuple[Any, threading.Thread]:
    from trainop_core.operator.manager import Manager
    from trainop_core.operator.options import Options
    from trainop_core.operator.webhook.options import WebhookOptions

    # No webhook server: this cluster registers no webhook configuration that would call it.
    # Every v1 kind and TrainJobs (a TrainJob scheme alone would run TrainJobs only).
    options = Options(
        enable_schemes=(*registry.names, "TrainJob"),
        metrics_bind_address="0",
        health_probe_bind_address="0",
        webhook=WebhookOptions(port=0),
    )
    manager = Manager(options, registry, api_client=cp.api_client())
    thread = threading.Thread(target=manager.run, name="operator", daemon=True)
    thread.start()
    return manager, thread


def _print_help(cp: ControlPlane, kubeconfig: Path, nodes: str, operator: bool) -> None:
    print(
        f"""
kube-apiserver {cp.url} ready in {cp.start_seconds:.1f} s; {nodes};
{"the trainop operator is running in this process" if operator else "no operator running"}.

  export KUBECONFIG={kubeconfig}
  kubectl apply -f examples/pytorch/ddp.yaml
  kubectl get pytorchjobs -n kubeflow -w
  kubectl logs -n kubeflow pytorch-ddp-digits-master-0
  kubectl apply -n kubeflow -f examples/pytorch/ddp-trainjob.yaml   # Trainer v2's TrainJob
  kubectl get trainjobs -n kubeflow -w

Ctrl-C stops everything and removes the control plane's data.
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
