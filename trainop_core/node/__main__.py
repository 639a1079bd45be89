"""``python -m trainop_core.node``: one process node (a kubelet running pods as processes)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainop_core.node.node import ProcessNode
    from trainop_core.node.sandbox import PodNetwork
    from trainop_core.node.server import RunningServer

PROG = "python -m trainop_core.node"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "A kubelet whose containers are processes of this machine: registers Node NAME with "
            "the API server of KUBECONFIG, renews its lease and runs the pods bound to it "
            "(command + args; images are not pulled). SIGTERM stops it and its containers."
        ),
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="how to reach the API")
    parser.add_argument("--name", required=True, help="the Node's name")
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="where pods' volumes, working directories and logs go (default: a directory "
        "named after the node under the temporary directory)",
    )
    parser.add_argument("--cpu", default=None, help="allocatable cpu (default: this machine's)")
    parser.add_argument("--memory", default=None, help="allocatable memory (default: all)")
    parser.add_argument("--pods", type=int, default=110, help="how many pods fit (default 110)")
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="REF=DIR",
        help="containers of image REF (with or without its tag) start in DIR, as in the "
        "image's WORKDIR (repeatable)",
    )
    parser.add_argument(
        "--kubelet-pki",
        type=Path,
        default=None,
        metavar="DIR",
        help="serve the kubelet endpoint (kubectl logs and exec through kube-apiserver) over "
        "HTTPS with a serving certificate from this KubeletPki directory, to kube-apiserver's "
        "client certificate only (default: no endpoint)",
    )
    parser.add_argument(
        "--kubelet-port", type=int, default=0, help="the endpoint's port (default: a free one)"
    )
    parser.add_argument(
        "--heartbeat-seconds", type=float, default=10.0, help="lease renewal period (default 10)"
    )
    network = parser.add_argument_group(
        "pod network",
        "join the cluster network whose hub is the network namespace NETWORK_HUB (made by the "
        "try-it cluster): each pod gets a network namespace and an address from --pod-cidr. "
        "Without it pods share this machine's network (pod IP 127.0.0.1, no cluster DNS).",
    )
    network.add_argument("--network-hub", default="", help="the hub's network namespace")
    network.add_argument("--pod-network", default="10.244.0.0/16", help="the whole pod network")
    network.add_argument("--pod-cidr", default="", help="this node's slice (its spec.podCIDR)")
    network.add_argument("--cluster-domain", default="cluster.local", help="the DNS zone")
    parser.add_argument(
        "--no-cgroups", action="store_true", help="run containers without resource limits"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format=f"%(asctime)s %(levelname)s node {args.name}: %(message)s",
    )
    from trainop_core.node import cgroups
    from trainop_core.node.node import ProcessNode, install_signal_handlers
    from trainop_core.node.registration import NodeConfig, host_storage
    from trainop_core.testing.rest import Rest

    images = dict(_image(item) for item in args.image)
    config = NodeConfig(args.name, pods=args.pods, pod_cidr=args.pod_cidr)
    sizes = {k: v for k, v in (("cpu", args.cpu), ("memory", args.memory)) if v}
    config = dataclasses.replace(config, **sizes)
    root = args.root or Path(tempfile.gettempdir()) / f"trainop-node-{args.name}"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    config = dataclasses.replace(config, ephemeral_storage=host_storage(root))
    rest = Rest.from_kubeconfig(args.kubeconfig, user_agent=f"trainop-process-node/{args.name}")
    node = ProcessNode(
        rest,
        config,
        root,
        cgroups=None if args.no_cgroups else cgroups.detect(args.name),
        image_roots=images,
        network=_network(args),
        heartbeat=args.heartbeat_seconds,
    )
    install_signal_handlers(node)
    server = _serve(args, node) if args.kubelet_pki else None
    try:
        node.run(on_ready=lambda: logging.info("ready"))
    finally:
        if server is not None:
            server.stop()
    return 0


def _serve(args: argparse.Namespace, node: ProcessNode) -> RunningServer:
    """Start the kubelet endpoint on the node's address; the node then publishes its port."""
    from trainop_core.node.pki import KubeletPki
    from trainop_core.node.server import serve_in_thread

    pki = KubeletPki(args.kubelet_pki)
    address = node.config.address
    cert, key = pki.node_serving(node.config.name, [address, node.config.name])
    server = serve_in_thread(node.containers, pki.server_context(cert, key), address,
                             args.kubelet_port)  # fmt: skip
    node.config = dataclasses.replace(node.config, port=server.port)
    return server


def _network(args: argparse.Namespace) -> PodNetwork | None:
    """The cluster network to join, or None (pods in this machine's network). Exits saying why
    when the hub was named but cannot be joined."""
    if not args.network_hub:
        logging.warning("no --network-hub: pods share this machine's network (pod IP 127.0.0.1)")
        return None
    from trainop_core.node.network import NetworkError
    from trainop_core.node.podnet import HubAddress, NodeNetwork

    if not args.pod_cidr:
        raise SystemExit(f"{PROG}: --network-hub needs --pod-cidr (this node's slice)")
    address = HubAddress(args.network_hub, args.pod_network, args.pod_cidr, args.cluster_domain)
    try:
        return NodeNetwork(address).start()
    except NetworkError as exc:
        raise SystemExit(f"{PROG}: cannot join the cluster network: {exc}") from exc


def _image(item: str) -> tuple[str, str]:
    ref, sep, directory = item.partition("=")
    if not sep or not ref or not directory:
        raise SystemExit(f"{PROG}: --image wants REF=DIR, got {item!r}")
    return ref, str(Path(directory).resolve())


if __name__ == "__main__":
    sys.exit(main())
