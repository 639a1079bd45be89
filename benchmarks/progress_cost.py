"""What training progress costs the operator: API requests and CPU per job, progress off and on.

    PYTHONPATH=. python benchmarks/progress_cost.py                  # ~10 min on 2 cores
    PYTHONPATH=. python benchmarks/progress_cost.py --rounds 1 --run-seconds 20

The operator benchmark's workload and machinery (benchmarks/operator_vs_upstream.py: a fresh real
control plane per setup with an audit log, the kubelet stand-in in its own process, 60 jobs of
PyTorchJob/TFJob/XGBoostJob with 4 pods each created at 5 a second, pods running 5 s, upstream's
default client limits), trainop only, in three setups:

* ``off``: ``--progress-interval=0``, pods print nothing (the operator before progress);
* ``on-silent``: progress on (the default interval), pods print nothing: what following costs
  a job that reports no progress (the log read when its primary pod ends);
* ``on-reporting``: progress on, every container prints `REPORT` (a progress line) when it
  starts: the reads and the writes of a job that reports.

Per setup (the median over rounds): API requests per job, in total and by verb and resource
(the audit log), the operator's CPU seconds per job, create->Succeeded latency p50/p95. Upstream
v1.9.3's requests per job at the same workload are not run again (its operator takes a Go build
and a run per round): they are read from benchmarks/results/issue24_latency.json, measured on
this machine with the same workload. Writes benchmarks/results/progress_cost.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import operator_vs_upstream as ovu
import upstream_operator as upstream

from trainop_core.testing.binaries import kubernetes_binaries

RESULTS = harness.REPO / "benchmarks" / "results"
UPSTREAM_FIGURES = RESULTS / "issue24_latency.json"
REPORT = "loss=0.42 progressPercentage=10 estimatedRemainingSeconds=40 step=1"
VARIANTS = {  # name -> (the operator's flags, what every container prints)
    "off": (("--progress-interval=0",), ""),
    "on-silent": ((), ""),
    "on-reporting": ((), REPORT),
}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for round_ in range(args.rounds):
        order = list(VARIANTS) if round_ % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            args.trainop_flags, args.pod_log = VARIANTS[name]
            setup = ovu.Setup(f"progress-{name}", "trainop", upstream.LATEST, ovu.KINDS_19,
                              "default", args.jobs, args.rate)  # fmt: skip
            print(f"round {round_ + 1}: progress {name} ...", flush=True)
            result = ovu.run_setup(setup, args, round_)
            result.update(variant=name, round=round_ + 1)
            results.append(result)
            print(f"  {one_line(result)}", flush=True)
    return results


def one_line(result: dict[str, Any]) -> str:
    jobs = result["jobs"]
    logs = result["requests"].get("get pods/log", 0) / jobs
    patches = sum(v for k, v in result["requests"].items() if k.startswith("patch ")) / jobs
    return (
        f"{result['requests_per_job']:.2f} requests/job (pods/log GET {logs:.2f}, PATCH "
        f"{patches:.2f}), {result['operator_cpu_seconds'] / jobs * 1000:.1f} ms CPU/job, "
        f"p50 {result['latency_p50']:.2f} s, {result['succeeded']}/{jobs} Succeeded"
    )


def medians(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in VARIANTS:
        runs = [r for r in results if r["variant"] == name]
        if not runs:
            continue
        jobs = runs[0]["jobs"]
        keys = sorted({k for r in runs for k in r["requests"]})
        out[name] = {
            "requests_per_job": statistics.median(r["requests_per_job"] for r in runs),
            "requests_per_job_by_verb_resource": {
                k: statistics.median(r["requests"].get(k, 0) / jobs for r in runs) for k in keys
            },
            "operator_cpu_ms_per_job": statistics.median(
                r["operator_cpu_seconds"] / r["jobs"] * 1000 for r in runs
            ),
            "latency_p50": statistics.median(r["latency_p50"] for r in runs),
            "latency_p95": statistics.median(r["latency_p95"] for r in runs),
            "rounds": len(runs),
        }
    return out


def upstream_figures() -> dict[str, Any]:
    """Upstream v1.9.3 at the same workload and limits, as stored (not run again here)."""
    stored = json.loads(UPSTREAM_FIGURES.read_text())
    key = "v1.9 / upstream v1.9.3 (default)"
    figures = stored["medians"][key]
    jobs = stored["workload"]["jobs"]
    return {
        "source": str(UPSTREAM_FIGURES.relative_to(harness.REPO)),
        "date": stored["date"],
        "workload": stored["workload"],
        "requests_per_job": figures["requests_per_job"],
        "operator_cpu_ms_per_job": 1000 * figures["operator_cpu_seconds"] / jobs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = ovu.workload_flags(parser, rounds=2, timeout=900.0)
    add("--json", type=Path, default=RESULTS / "progress_cost.json", help="the results file")
    add("--workdir", type=Path, help="logs, audit logs (default: a new temp dir)")
    args = parser.parse_args(argv)
    ovu.trainop_revision()  # what runs, before anything can change it
    args.profile = False
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="progress-cost-"))
    print(f"work dir: {args.workdir}", flush=True)
    kubernetes_binaries(build=True)
    results = run(args)
    document = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": ovu.machine(),
        "versions": {"trainop": ovu.trainop_revision()},
        "workload": {
            key: getattr(args, key)
            for key in ("jobs", "replicas", "rate", "run_seconds", "warmup", "rounds")
        },
        "report_line": REPORT,
        "results": results,
        "medians": medians(results),
        "upstream_v1_9_3_stored": upstream_figures(),
    }
    for name, figures in document["medians"].items():
        print(
            f"{name:13} {figures['requests_per_job']:6.2f} requests/job  "
            f"{figures['operator_cpu_ms_per_job']:6.1f} ms CPU/job  "
            f"p50 {figures['latency_p50']:.2f} s"
        )
    print(f"upstream v1.9.3 (stored) {document['upstream_v1_9_3_stored']['requests_per_job']:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=1, default=str) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
