"""Peak memory of following logs: `trainop logs`, `logs -f` and `run` with a big replica log.

    python benchmarks/logs_memory.py [--mb 50]

Creates a job (in a temporary TRAINOP_HOME) whose one replica writes `--mb` MiB of output: half
as 100-byte lines, half as one line without an end. Prints the peak RSS (ru_maxrss) of
`trainop get` (the baseline: interpreter + trainop), `trainop logs`, `trainop logs -f` and of
`trainop run` of the same job, each in a fresh process. Goal: within ~30 MiB of the baseline,
whatever `--mb` is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs the CLI and prints its own peak RSS (KiB) as the last line of stderr.
PEAK = (
    "import resource, sys\n"
    "from trainop_core.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)

WRITER = (
    "import sys\n"
    "mb = int(sys.argv[1])\n"
    "line = b'x' * 99 + b'\\n'\n"
    "out = sys.stdout.buffer\n"
    "for _ in range(mb * 1024 * 1024 // 200):\n"
    "    out.write(line)\n"
    "out.write(b'y' * (mb * 1024 * 1024 // 2))\n"
)


def job_yaml(name: str, mb: int) -> str:
    return f"""apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: {name}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - name: tensorflow
            image: python
            command: [python, -c, {WRITER!r}, "{mb}"]
"""


def peak_mib(env: dict[str, str], *args: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    return int(done.stderr.split()[-1]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50, help="MiB the replica writes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainop-logs-bench-") as tmp:
        env = dict(os.environ, TRAINOP_HOME=str(Path(tmp) / "home"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        first, second = Path(tmp) / "big.yaml", Path(tmp) / "again.yaml"
        first.write_text(job_yaml("big", args.mb))
        second.write_text(job_yaml("again", args.mb))
        subprocess.run(
            [sys.executable, "-m", "trainop_core", "run", str(first)],
            env=env,
            stdout=subprocess.DEVNULL,
            check=True,
        )
        rows = [
            ("trainop get big (baseline)", peak_mib(env, "get", "big")),
            (f"trainop logs big ({args.mb} MiB log)", peak_mib(env, "logs", "big")),
            ("trainop logs -f big", peak_mib(env, "logs", "-f", "big")),
            (f"trainop run (replica writes {args.mb} MiB)", peak_mib(env, "run", str(second))),
        ]
        subprocess.run(
            [sys.executable, "-m", "trainop_core", "delete", "big", "again"],
            env=env,
            capture_output=True,
            check=False,
        )
    for label, mib in rows:
        print(f"{label:45s} peak RSS {mib:7.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
