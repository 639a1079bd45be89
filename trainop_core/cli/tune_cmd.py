"""`trainop tune FILE`: a hyperparameter search whose every trial is a training job.

FILE is a job template (any kind) using `${trialParameters.NAME}`; each `--param NAME=SPEC` gives
a search space (`loguniform:1e-4:1e-1`, `uniform:a:b`, `randint:a:b`, `choice:3,5,7`,
`grid:1,2,3`). The search runs on Ray Tune (the `ray` extra) through `trainop_hpo.tune_job`;
`--katib-export OUT.yaml` also writes the same search as a Katib Experiment (or refuses, saying
what Katib cannot express) and notes where Katib behaves differently.

Ray and the HPO integration are imported inside `run`, so `trainop --help` works without them.
Exit codes: 0 a best trial was found, 1 every trial failed, 2 invalid input or no Ray.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

from trainop_core.cli._output import EXIT_FAILED, EXIT_INVALID, EXIT_OK, table

RAY_MISSING = "trainop tune needs Ray Tune: pip install 'trainop[ray]'"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tune",
        help="hyperparameter search: every trial is a training job (Ray Tune)",
        description=(
            "Run a hyperparameter search over FILE, a job template of any kind whose command, "
            "args or env use ${trialParameters.NAME}. Each trial is one job; its primary replica "
            "prints `name=value` metric lines. Needs the ray extra (pip install 'trainop[ray]'). "
            "Prints one row per trial (Succeeded, Stopped early, or Failed with its reason) and "
            "the best parameters. Exit codes: 0 a best trial was found, 1 every trial failed, "
            "2 invalid input or no Ray."
        ),
    )
    parser.add_argument("file", type=Path, help="the job template's YAML or JSON file")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="a search space: loguniform:LO:HI, uniform:LO:HI, randint:LO:HI, choice:A,B,C or "
        "grid:A,B,C (repeat for each parameter)",
    )
    parser.add_argument("--metric", required=True, help="the metric to optimise")
    parser.add_argument("--mode", choices=("min", "max"), default="min", help="default: min")
    parser.add_argument("--samples", type=int, default=1, help="trials (times every grid point)")
    parser.add_argument(
        "--scheduler",
        choices=("fifo", "asha"),
        default="fifo",
        help="asha stops unpromising trials early (one rung step per metric line)",
    )
    parser.add_argument(
        "--backend",
        default="local",
        help="where trial jobs run: local | kubernetes | ray (the Ray cluster Tune runs on)",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="namespace of the trial jobs (default: the template's, else the backend's default)",
    )
    parser.add_argument(
        "--max-concurrent", type=int, default=None, metavar="N", help="trials running at once"
    )
    parser.add_argument(
        "--cpus-per-trial",
        type=float,
        default=1.0,
        metavar="CPUS",
        help="Ray CPUs each trial's job-following function reserves (default 1: two trials at "
        "a time on 2 cores; it is nearly idle, so 0.25-0.5 is usually right)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop the search (and delete the running trials' jobs) after SECONDS",
    )
    parser.add_argument(
        "--storage-path",
        type=Path,
        default=None,
        metavar="DIR",
        help="where Ray Tune keeps the experiment's results (default: ~/ray_results)",
    )
    parser.add_argument(
        "--katib-export",
        type=Path,
        default=None,
        metavar="OUT.yaml",
        help="also write the same search as a Katib Experiment to OUT.yaml (trial count, "
        "parallelism, algorithm and early stopping follow --samples, --max-concurrent, the "
        "grid and --scheduler; refused when Katib cannot express the search)",
    )
    parser.add_argument(
        "--export-only", action="store_true", help="with --katib-export: write it and stop"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        hpo = _integration()
    except ImportError:
        print(f"error: {RAY_MISSING}", file=sys.stderr)
        return EXIT_INVALID
    from trainop_core.errors import TrainopError

    try:
        _check_numbers(args)
        space = hpo.parse_params(args.param)
        hpo.check_parameters(hpo.read_template(args.file), space)
        if args.katib_export is not None:
            _export(hpo, args, space)
    except (TrainopError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    if args.export_only:
        return EXIT_OK
    try:
        import ray  # noqa: F401  (the extra is needed only from here on)
    except ImportError:
        print(f"error: {RAY_MISSING}", file=sys.stderr)
        return EXIT_INVALID
    return _search(hpo, args, space)


def _check_numbers(args: argparse.Namespace) -> None:
    if not args.param:
        raise ValueError("give at least one --param NAME=SPEC")
    if args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    if args.cpus_per_trial <= 0:
        raise ValueError(f"--cpus-per-trial must be positive, got {args.cpus_per_trial:g}")
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ValueError(f"--max-concurrent must be at least 1, got {args.max_concurrent}")
    if args.export_only and args.katib_export is None:
        raise ValueError("--export-only needs --katib-export OUT.yaml")


def _integration() -> Any:
    """The trainop_hpo package, imported by name: the core never depends on an integration."""
    return importlib.import_module("trainop_hpo")


def _export(hpo: Any, args: argparse.Namespace, space: dict[str, Any]) -> None:
    """The same search as a Katib Experiment, or a ValueError saying what Katib cannot do."""
    if args.time_budget is not None:
        raise ValueError(
            "--katib-export: a Katib Experiment has no time budget; drop --time-budget"
        )
    search = {
        "num_samples": args.samples,
        "max_concurrent": args.max_concurrent,
        "scheduler": args.scheduler,
    }
    text = hpo.katib_experiment_yaml(args.file, space, args.metric, args.mode, **search)
    args.katib_export.write_text(text)
    print(f"wrote Katib Experiment to {args.katib_export}", file=sys.stderr)
    for note in hpo.katib_notes(space, **search):
        print(f"note: {note}", file=sys.stderr)


def _search(hpo: Any, args: argparse.Namespace, space: dict[str, Any]) -> int:
    import ray

    started = _start_ray(ray)
    try:
        grid = hpo.tune_job(
            args.file,
            space,
            metric=args.metric,
            mode=args.mode,
            num_samples=args.samples,
            scheduler=None if args.scheduler == "fifo" else args.scheduler,
            backend=args.backend,
            namespace=args.namespace,
            max_concurrent=args.max_concurrent,
            resources_per_trial={"cpu": args.cpus_per_trial},
            time_budget_s=args.time_budget,
            storage_path=args.storage_path,
        )
    finally:
        if started:
            ray.shutdown()
    summaries = hpo.summarize(grid, args.metric, args.mode)
    print(_results_table(summaries, args.metric))
    _print_failures(summaries)
    return _print_best(summaries)


def _start_ray(ray: Any) -> bool:
    """A quiet local Ray instance unless one is running already (RAY_ADDRESS, ray.init)."""
    import logging

    # The table below says how every trial ended; Tune's own per-trial tracebacks and its
    # progress boxes (the new output engine prints some even at verbose=0) are noise here.
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    if ray.is_initialized():
        return False
    ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    return True


def _results_table(summaries: list[Any], metric: str) -> str:
    rows = [["TRIAL", "PARAMS", metric.upper(), "STATE"]]
    for s in summaries:
        params = " ".join(f"{k}={v}" for k, v in sorted(s.params.items()))
        value = "-" if s.metric is None else f"{s.metric:.6g}"
        rows.append([s.trial_id, params, value, s.state])
    return table(rows)


def _print_best(summaries: list[Any]) -> int:
    best = next((s for s in summaries if s.best), None)
    if best is None:
        print("error: every trial failed", file=sys.stderr)
        return EXIT_FAILED
    params = " ".join(f"{k}={v}" for k, v in sorted(best.params.items()))
    print(f"best: {params} ({best.trial_id})")
    return EXIT_OK


def _print_failures(summaries: list[Any]) -> None:
    for s in summaries:
        if s.reason:
            print(f"{s.trial_id}: {s.reason}", file=sys.stderr)
