"""A real multi-node Ray cluster on this machine: one node per network namespace.

The head node runs in the test's own network namespace on a bridge address (it holds no CPUs, so
replicas never land there, as on a cluster whose head only coordinates); every worker node runs
in a network namespace of its own (`ip netns` + a veth on the bridge), with its own IP, and its
own /etc/hosts (via /etc/netns/<ns>/hosts) mapping the machine's hostname to that IP, as a real
host's would (gloo finds its interface that way). Nodes share this machine's filesystem and
Python. Everything is private: addresses in a random 10.x/24, ports probed free, Ray's temp
directories under the test's directory (so no `ray_current_cluster` file is written where other
`ray.init()` calls on the machine would find it). `stop` kills every process of every node
(including those Ray spawned) and removes the namespaces, the bridge and the files.

Needs root and iproute2; `available()` says whether this machine can do it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")


def available() -> str:
    """ "" if network namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (ip netns)"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    name = f"trp{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


def _free_port(host: str = "") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Node:
    name: str  # "head", "w1", ...
    ip: str
    netns: str | None  # None: the test's own namespace
    cpus: int
    temp_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class NetnsRayCluster:
    root: Path
    workers: int = 2
    cpus_per_worker: int = 2
    env: dict[str, str] = field(default_factory=dict)  # extra env for every node
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.bridge = f"trb{tag}"
        self.prefix = f"trn{tag}"
        self.subnet = self._pick_subnet()
        self.gcs_port = 0
        self._made_netns: list[str] = []
        self._bridge_made = False

    # --- lifecycle --------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"{self.subnet}.1:{self.gcs_port}"

    def start(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._bridge_made = True
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self.gcs_port = _free_port()
        head = Node("head", f"{self.subnet}.1", None, 0, self.root / "h")
        self.nodes.append(head)
        self._launch(head)
        for index in range(1, self.workers + 1):
            self.add_worker(index)

    def add_worker(self, index: int) -> Node:
        """Start worker node `index` (its namespace is made once and kept for restarts)."""
        netns = f"{self.prefix}-{index}"
        if netns not in self._made_netns:
            self._make_netns(netns, index)
        existing = [n for n in self.nodes if n.netns == netns]
        node = existing[0] if existing else None
        if node is None:
            node = Node(f"w{index}", f"{self.subnet}.{index + 1}", netns, self.cpus_per_worker,
                        self.root / f"w{index}")  # fmt: skip
            self.nodes.append(node)
        self._launch(node)
        return node

    def _make_netns(self, netns: str, index: int) -> None:
        ip = f"{self.subnet}.{index + 1}"
        _ip("netns", "add", netns)
        self._made_netns.append(netns)
        veth = f"{self.prefix}v{index}"
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        etc = Path("/etc/netns") / netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{ip} {socket.gethostname()}\n")

    def _launch(self, node: Node) -> None:
        node.temp_dir.mkdir(parents=True, exist_ok=True)
        node.log = self.root / f"{node.name}.log"
        command = [RAY, "start", "--block", "--disable-usage-stats", "--temp-dir",
                   str(node.temp_dir), "--node-ip-address", node.ip, "--num-cpus",
                   str(node.cpus)]  # fmt: skip
        if node.netns is None:
            command += ["--head", "--port", str(self.gcs_port), "--include-dashboard=false",
                        "--ray-client-server-port", str(_free_port()),
                        "--dashboard-agent-listen-port", str(_free_port()),
                        "--dashboard-agent-grpc-port", str(_free_port()),
                        "--metrics-export-port", str(_free_port())]  # fmt: skip
        else:
            command = ["ip", "netns", "exec", node.netns, *command, "--address", self.address]
        env = {**os.environ, **self.env, "RAY_USAGE_STATS_ENABLED": "0"}
        with node.log.open("ab") as out:
            node.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )  # fmt: skip

    def wait_for_nodes(self, ray_module: object, timeout: float = 180.0) -> None:
        """Until every started node is alive in the cluster (the test process is connected)."""
        want = {n.ip for n in self.nodes if n.alive}
        deadline = time.monotonic() + timeout
        while True:
            alive = {n["NodeManagerAddress"] for n in ray_module.nodes() if n["Alive"]}  # type: ignore[attr-defined]
            if want <= alive:
                return
            for node in self.nodes:
                if node.process is not None and node.process.poll() is not None and node.ip in want:
                    raise RuntimeError(f"node {node.name} exited:\n{self.tail(node)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes {sorted(want - alive)} did not join in {timeout} s")
            time.sleep(0.5)

    def kill_node(self, node: Node) -> None:
        """Kill every process of the node at once (SIGKILL), as a machine that dies."""
        assert node.netns is not None, "the head is not killed: the cluster dies with it"
        pids = subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True, text=True)
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        if node.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(timeout=30)

    def stop(self) -> None:
        """Kill every node's processes, then remove namespaces, bridge and files. Idempotent."""
        for node in reversed(self.nodes):
            if node.netns is not None:
                self.kill_node(node)
        for node in self.nodes:
            if node.netns is None and node.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=30)
                self._kill_session_members(node.process.pid)
        for netns in self._made_netns:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / netns, ignore_errors=True)
        self._made_netns.clear()
        if self._bridge_made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            self._bridge_made = False

    @staticmethod
    def _kill_session_members(sid: int) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid:
                    os.kill(int(entry.name), signal.SIGKILL)

    def tail(self, node: Node, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            assert node.log is not None
            return "\n".join(node.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    # --- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _pick_subnet() -> str:
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        for _ in range(100):
            subnet = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
            if f" {subnet}." not in used:
                return subnet
        raise RuntimeError("no free 10.x subnet found")
