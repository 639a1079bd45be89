"""The KFP v2 components: `run_training_job` (lightweight Python) and `trainop_run` (container).

Both run in the project's image (`trainop_kfp.constants.IMAGE`, which holds kfp and trainop). The
Python component's body is one call into `trainop_kfp.runner`, where the behaviour is tested.
"""

# No `from __future__ import annotations`: kfp reads these annotations as real types.

from typing import NamedTuple, Optional

from kfp import dsl
from kfp.dsl import Metrics, Output, TaskConfig

from trainop_kfp.constants import DEFAULT_BACKEND, DEFAULT_TIMEOUT_SECONDS, IMAGE

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

COMPONENT_OPTIONS = {
    "base_image": IMAGE,
    "install_kfp_package": False,
    "task_config_passthroughs": PASSTHROUGHS,
}


# The body runs as its own module in the image: defaults must be literals (DEFAULT_BACKEND and
# DEFAULT_TIMEOUT_SECONDS; a test keeps them in step) and imports must be inside.
@dsl.component(**COMPONENT_OPTIONS)  # type: ignore[untyped-decorator]  # reason: kfp has no hints
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
    """Run a TFJob, PyTorchJob, MXJob or XGBoostJob to its end through trainop.

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


# The job text (an input) is written to a file, not piped to `trainop run -`, so that `exec` makes
# trainop PID 1 and it receives the SIGTERM of a cancelled run. `--rm` deletes the job however the
# run ends (its output is in the step's log). `$0`..`$3` are the args below; an empty namespace
# keeps the job's own.
_RUN_SCRIPT = (
    'job_file="$(mktemp -d)/job.yaml"\n'
    'printf "%s\\n" "$0" > "$job_file"\n'
    'exec trainop run "$job_file" --rm --backend "$1" ${2:+--namespace "$2"} --timeout "$3"\n'
)


@dsl.container_component  # type: ignore[untyped-decorator]  # reason: kfp has no hints
def trainop_run(
    job_yaml: str,
    backend: str = DEFAULT_BACKEND,
    namespace: str = "",
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
) -> dsl.ContainerSpec:
    """`trainop run` in the project image: streams every replica's output, exits 0 when the job
    Succeeded, 1 when it Failed, 124 on timeout, 143 on SIGTERM; the job is deleted at the end."""
    return dsl.ContainerSpec(
        image=IMAGE,
        command=["sh", "-ec", _RUN_SCRIPT],
        args=[job_yaml, backend, namespace, timeout_seconds],
    )
