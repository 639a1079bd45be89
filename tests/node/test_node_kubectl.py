"""kubectl logs and kubectl exec reach a process node's containers through kube-apiserver, which
authenticates to the node's endpoint with its kubelet client certificate."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from nodekit import NodeCluster, pod

from trainop_core.testing.builders import wait_for

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
SERVE = (
    "import os, sys, time\n"
    "print('first line'); print('to stderr', file=sys.stderr)\n"
    "n = int(open('/state/runs').read()) if os.path.exists('/state/runs') else 0\n"
    "open('/state/runs', 'w').write(str(n + 1)); print('run', n, flush=True)\n"
    "sys.exit(1) if n == 0 else time.sleep(600)"
)


def kubectl(kubeconfig: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_kubectl_logs_previous_and_exec_with_stdin_and_exit_code(
    node_cluster: NodeCluster, ns: str, kubeconfig: Path
) -> None:
    built = (
        pod("served").policy("OnFailure")
        .python(SERVE, volumeMounts=[{"name": "state", "mountPath": "/state"}],
                env=[{"name": "GREETING", "value": "hello from the pod"}])
        .volume("state", emptyDir={})
    )  # fmt: skip
    node_cluster.create(ns, built.build())
    node_cluster.wait_status(
        ns, "served", lambda s: s["restartCount"] == 1 and "running" in s["state"]
    )

    logs = wait_for(lambda: (out := kubectl(kubeconfig, "logs", "served")).returncode == 0
                    and "run 1" in out.stdout and "to stderr" in out.stdout and out,
                    60, interval=0.2)  # fmt: skip
    # stdout and stderr are two pipes (as a container runtime's): each keeps its order, the
    # order between them is whenever the node read each
    lines = logs.stdout.splitlines()
    assert sorted(lines[:3]) == ["first line", "run 1", "to stderr"], lines
    assert lines.index("first line") < lines.index("run 1"), lines
    previous = kubectl(kubeconfig, "logs", "served", "--previous")
    assert "run 0" in previous.stdout and "run 1" not in previous.stdout
    # the newest line is whichever of the two pipes the node read last
    assert kubectl(kubeconfig, "logs", "served", "--tail=1").stdout.strip() == lines[-1]
    assert kubectl(kubeconfig, "logs", "served", "--tail=2").stdout.splitlines() == lines[-2:]

    echo = kubectl(kubeconfig, "exec", "-i", "served", "--", "python", "-c",
                   "import os, socket, sys; print(sys.stdin.read().upper(), "
                   "os.environ['GREETING'], socket.gethostname())", stdin="piped in")  # fmt: skip
    assert echo.returncode == 0, echo.stderr
    assert echo.stdout.split() == ["PIPED", "IN", "hello", "from", "the", "pod", "served"]
    failed = kubectl(kubeconfig, "exec", "served", "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7
