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

Nothing outlives the test process, however it ends. Every name carries the cluster's tag
(`trn<tag>-<i>` namespaces, `trn<tag>v<i>` veths, `trb<tag>` bridge) and every node process the
env `TRAINOP_RAY_TEST_CLUSTER=<tag>` (Ray's workers and the replicas inherit it). Before
anything is made, an owner record (`/tmp/trainop-ray-tests-<uid>/<tag>.json`: the test
process's pid and start time, the temp root) is written, and a reaper process starts that
waits for the owner to die and then destroys the cluster (a killed pytest, a crashed session).
`sweep_stale()`, at the start of a session, destroys what a crashed run left whose owner is
gone: only names of this shape, only tags without a live owner.

Needs root and iproute2; `available()` says whether this machine can do it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
MARKER = "TRAINOP_RAY_TEST_CLUSTER"
OWNERS = Path(tempfile.gettempdir()) / f"trainop-ray-tests-{os.getuid()}"
NETNS_ETC = Path("/etc/netns")
NAME = re.compile(r"^tr[nb]([0-9a-f]{6})(?:-\d+|v\d+)?$")  # trn<tag>-1, trn<tag>v1, trb<tag>


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
        self.tag = uuid.uuid4().hex[:6]
        self.bridge = f"trb{self.tag}"
        self.prefix = f"trn{self.tag}"
        self.subnet = self._pick_subnet()
        self.gcs_port = 0
        self._made_netns: list[str] = []
        self._bridge_made = False
        self._reaper: subprocess.Popen[bytes] | None = None

    # --- lifecycle --------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"{self.subnet}.1:{self.gcs_port}"

    def start(self) -> None:
        """Owner record and reaper first, then the bridge and the nodes."""
        write_owner(self.tag, self.root)
        self._reaper = start_reaper(self.tag, self.root)
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
        env = {**os.environ, **self.env, "RAY_USAGE_STATS_ENABLED": "0", MARKER: self.tag}
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
        """Kill every node's processes, then remove namespaces, bridge, files, the owner record
        and the reaper. Idempotent."""
        for node in reversed(self.nodes):
            if node.netns is not None and node.alive:
                self.kill_node(node)
        destroy(self.tag)
        for node in self.nodes:
            if node.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=30)
        self._made_netns.clear()
        self._bridge_made = False
        if self._reaper is not None:
            self._reaper.kill()
            self._reaper.wait(timeout=30)
            self._reaper = None
        remove_owner(self.tag)

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


# --- owners, stale clusters, the reaper -----------------------------------------------------------
def _start_time(pid: int) -> str:
    """The live process's start time (clock ticks since boot; a pid reused later has another
    one), "" once it has exited (a zombie included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return "" if fields[0] in ("Z", "X") else fields[19]


def write_owner(tag: str, root: Path) -> None:
    OWNERS.mkdir(parents=True, exist_ok=True)
    owner = {"pid": os.getpid(), "start": _start_time(os.getpid()), "root": str(root)}
    (OWNERS / f"{tag}.json").write_text(json.dumps(owner))


def remove_owner(tag: str) -> None:
    with contextlib.suppress(OSError):
        (OWNERS / f"{tag}.json").unlink()


def _owner(tag: str) -> dict[str, object] | None:
    try:
        found: dict[str, object] = json.loads((OWNERS / f"{tag}.json").read_text())
    except (OSError, ValueError):
        return None
    return found


def owner_alive(tag: str) -> bool:
    owner = _owner(tag)
    if owner is None:
        return False
    pid = int(str(owner.get("pid", 0)))
    return bool(pid) and _start_time(pid) == owner.get("start")


def _members(tag: str | None, root: str) -> set[int]:
    """Live processes of cluster `tag`: those carrying its marker in their environment (the
    nodes' `ray start`, the replicas), and those with their working directory or an open file
    under its temp root (Ray's daemons and workers, which rename themselves with setproctitle
    and thereby overwrite what /proc shows of their environment)."""
    marker = f"{MARKER}={tag}".encode() if tag else None
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            environ = (entry / "environ").read_bytes().split(b"\0") if marker else []
            if marker in environ or (root and _holds(entry, root)):
                found.add(int(entry.name))
    return found


def _holds(entry: Path, root: str) -> bool:
    prefix = root.rstrip("/") + "/"
    if os.readlink(entry / "cwd").startswith(prefix):
        return True
    with contextlib.suppress(OSError):
        for fd in (entry / "fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd).startswith(prefix):
                    return True
    return False


def _names(tag: str) -> tuple[list[str], list[str]]:
    """The cluster's network namespaces (made, or only their /etc/netns dir left) and bridges."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    spaces = {line.split()[0] for line in listed.splitlines() if line.strip()}
    if NETNS_ETC.is_dir():
        spaces |= {p.name for p in NETNS_ETC.iterdir()}
    links = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True,
                           text=True).stdout  # fmt: skip
    bridges = {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()}
    mine = [n for n in sorted(spaces) if NAME.match(n) and n.startswith(f"trn{tag}-")]
    return mine, [b for b in bridges if b == f"trb{tag}"]


def destroy(tag: str) -> None:
    """Kill every process of cluster `tag` (in its namespaces, or carrying its marker), remove
    its namespaces, bridge, temp root. Idempotent; touches nothing of another tag."""
    spaces, bridges = _names(tag)
    owner = _owner(tag) or {}
    root = str(owner.get("root", ""))
    root = root if root.startswith("/tmp/trt-") else ""
    for _ in range(5):  # processes may still be spawning children while they are killed
        pids = _members(tag, root)
        for netns in spaces:
            listed = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
            pids |= {int(p) for p in listed.stdout.split()}
        pids.discard(os.getpid())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not pids:
            break
        time.sleep(0.2)
    for netns in spaces:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        shutil.rmtree(NETNS_ETC / netns, ignore_errors=True)
    for bridge in bridges:
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    if root:
        shutil.rmtree(root, ignore_errors=True)


def sweep_stale() -> list[str]:
    """Destroy every cluster a crashed run left (tags without a live owner); their tags."""
    tags = {p.stem for p in OWNERS.glob("*.json")} if OWNERS.is_dir() else set()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    names += [p.name for p in NETNS_ETC.iterdir()] if NETNS_ETC.is_dir() else []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names += [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()]
    tags |= {m.group(1) for m in map(NAME.match, names) if m}
    stale = sorted(tag for tag in tags if not owner_alive(tag))
    for tag in stale:
        destroy(tag)
        remove_owner(tag)
    _sweep_roots()
    return stale


def _sweep_roots(min_age_seconds: float = 600.0) -> None:
    """Temp roots (/tmp/trt-*) that no live owner names and no process uses any more."""
    owned = set()
    for record in OWNERS.glob("*.json") if OWNERS.is_dir() else []:
        owned.add(str((_owner(record.stem) or {}).get("root", "")))
    for root in Path("/tmp").glob("trt-*"):
        with contextlib.suppress(OSError):
            old = time.time() - root.stat().st_mtime > min_age_seconds
            if old and str(root) not in owned and not _members(None, str(root)):
                shutil.rmtree(root, ignore_errors=True)


def start_reaper(tag: str, root: Path) -> subprocess.Popen[bytes]:
    """A process, in a session of its own, that destroys the cluster once this process dies."""
    command = [sys.executable, __file__, "reap", tag, str(os.getpid())]
    log = (root / "reaper.log").open("ab")
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True, close_fds=True)  # fmt: skip


def _reap(tag: str, owner: int) -> None:
    start = _start_time(owner)
    while start and _start_time(owner) == start:
        time.sleep(0.5)
    destroy(tag)
    remove_owner(tag)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "reap":
        _reap(sys.argv[2], int(sys.argv[3]))
