"""The KFP v2 components: `run_training_job` and `trainop_run`, both lightweight Python.

Both run in a stock Python image and install trainop when they start (`trainop_kfp.constants`:
IMAGE and PACKAGE, said once; by default the wheel of this very trainop, `trainop_kfp.wheel`).
Each body is one call into `trainop_kfp.runner`, where the behaviour is tested; both run under
kfp.local too.
"""

# No `from __future__ import annotations`: kfp reads these annotations as real types.

from collections.abc import Callable
from typing import Any, NamedTuple, Optional

from kfp import dsl
from kfp.dsl import Metrics, Output, TaskConfig

from trainop_kfp.constants import IMAGE, PACKAGE
from trainop_kfp.wheel import build_wheel, install_stage

# Pipeline-task settings forwarded to every replica. Env also applies to this launcher task
# (harmless, and proxies or credentials set there usually matter to the launcher too); resources
# and volumes do not, so the task does not reserve a second copy or mount a RWO volume twice.
PASSTHROUGHS = [
    dsl.TaskConfigField.RESOURCES,
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.ENV, apply_to_task=True),
    dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
    dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
    dsl.TaskConfigField.KUBERNETES_AFFINITY,
    dsl.TaskConfigField.KUBERNETES_VOLUMES,
]


def component(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`dsl.component` in the stock image, installing trainop as `trainop_kfp.constants` says:
    the user's PACKAGE, else the wheel of this trainop, installed by a stage inserted right after
    KFP's own install stage (which installs kfp, same version as the compiling SDK, --no-deps)."""

    def make(func: Callable[..., Any]) -> Any:
        packages = [PACKAGE] if PACKAGE else []
        made = dsl.component(func, base_image=IMAGE, packages_to_install=packages, **options)
        if not PACKAGE:
            container = made.component_spec.implementation.container
            container.command = _with_wheel_stage(list(container.command))
        return made

    return make


def _with_wheel_stage(command: list[str]) -> list[str]:
    # KFP's install stage is `sh -c '... && "$0" "$@"'`: the next stage runs after it.
    after = next((i + 1 for i, part in enumerate(command) if '"$0" "$@"' in part), None)
    if command[:2] != ["sh", "-c"] or after is None:
        raise RuntimeError(f"kfp's component command has a shape trainop does not know: {command}")
    return [*command[:after], *install_stage(build_wheel()), *command[after:]]


# The body runs as its own module in the image: defaults must be literals (DEFAULT_BACKEND and
# DEFAULT_TIMEOUT_SECONDS; a test keeps them in step) and imports must be inside.
@component(task_config_passthroughs=PASSTHROUGHS)
def run_training_job(
    metrics: Output[Metrics],
    task_config: TaskConfig,
    job: Optional[dict] = None,  # type: ignore[type-arg]  # noqa: UP045  # reason: kfp wants bare dict
    job_yaml: str = "",
    backend: str = "kubernetes",
    namespace: str = "",
    timeout_seconds: int = 86400,
    delete_after: bool = True,
    workdir: str = "",
) -> NamedTuple("Outputs", [("state", str), ("name", str)]):  # type: ignore[valid-type]  # reason: kfp needs the inline form
    """Run a Kubeflow training job of any kind (TFJob, PyTorchJob, MPIJob, ...) to its end.

    Give `job` (a dict) or `job_yaml` (YAML or JSON text). Fails when the job Failed or did not
    finish within `timeout_seconds` (0: no limit; the job is deleted), and deletes the job when
    the run is cancelled. `backend`: kubernetes, or local for kfp.local; `workdir`: where the
    local backend resolves relative paths in the job. Outputs: `state`, `name`, and `metrics`,
    the `name=value` metrics the primary replica printed."""
    from trainop_kfp.runner import run_component

    return run_component(
        metrics=metrics,
        task_config=task_config,
        job=job,
        job_yaml=job_yaml,
        backend=backend,
        namespace=namespace,
        timeout_seconds=timeout_seconds,
        delete_after=delete_after,
        workdir=workdir,
    )


@component()
def trainop_run(
    job_yaml: str,
    backend: str = "kubernetes",
    namespace: str = "",
    timeout_seconds: int = 86400,
) -> None:
    """`trainop run --rm` on the job text (YAML or JSON): streams every replica's output into the
    step's log, fails when the job Failed or did not finish within `timeout_seconds` (0: no
    limit), and deletes the job however the step ends (a cancelled run included). An empty
    `namespace` keeps the job's own."""
    from trainop_kfp.runner import run_cli

    run_cli(
        job_yaml=job_yaml,
        backend=backend,
        namespace=namespace,
        timeout_seconds=timeout_seconds,
    )
