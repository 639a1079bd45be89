"""MPIJob (kubeflow.org/v1): a Launcher runs `mpirun`, which starts every rank in a Worker replica
through an rsh agent; the job's state is the launcher's.

Besides pods (no Services) the kind plans the ConfigMap `<job>-config` (hostfile, kubexec.sh,
discover_hosts.sh) and the launcher's ServiceAccount, Role and RoleBinding (`Kind.objects`); the
launcher's pod waits until every worker runs: on Kubernetes in its kubectl-delivery init
container, as upstream's, which also gives it kubectl for upstream's rsh agent, kubexec.sh
(`kubectl exec`); on a process backend the planner holds it back (`Kind.start_after`). A
process backend runs no kubectl: it names its own agent and the directory it writes the job's
ConfigMaps to (kind options `process.exec_agent`, `process.configmap_dir`), and its agent starts
each rank in its worker replica's environment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.podtemplate import containers
from trainop_core.api.types import CleanPodPolicy, ReplicaSpec, RestartPolicy
from trainop_core.errors import Problem
from trainop_core.kinds.base import (
    CONFIGMAP_DIR_OPTION,
    EXEC_AGENT_OPTION,
    ClusterContext,
    Kind,
    ReplicaCounts,
    Verdict,
)
from trainop_core.kinds.common import (
    RUNNING,
    SUCCEEDED,
    env_var,
    exactly_one,
    failure_verdict,
    replica_spec,
)


class MPIJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="mpiReplicaSpecs")
    slots_per_worker: int | None = None
    clean_pod_policy: CleanPodPolicy | None = None  # legacy twin of runPolicy.cleanPodPolicy
    main_container: str | None = None


class MPIJob(TrainingJob):
    kind: str = "MPIJob"
    spec: MPIJobSpec


LAUNCHER, WORKER = "Launcher", "Worker"
FIELD = "mpiReplicaSpecs"
CONFIG_VOLUME, CONFIG_DIR = "mpi-job-config", "/etc/mpi"
KUBECTL_VOLUME, KUBECTL_DIR = "mpi-job-kubectl", "/opt/kube"
KUBEXEC, HOSTFILE, DISCOVER = "kubexec.sh", "hostfile", "discover_hosts.sh"
SCRIPT_MODE, HOSTFILE_MODE = 0o555, 0o444
# Upstream's --mpi-kubectl-delivery-image (PlanOptions.kind_options).
KUBECTL_IMAGE_OPTION = "mpi.kubectl_delivery_image"


def _spec(job: TrainingJob) -> MPIJobSpec:
    if not isinstance(job.spec, MPIJobSpec):
        raise TypeError(f"expected an MPIJob, got {job.kind}")
    return job.spec


def _slots(job: TrainingJob) -> int:
    slots = _spec(job).slots_per_worker
    return 1 if slots is None else slots


def launcher_name(job: TrainingJob) -> str:
    return f"{job.name}-launcher"


def worker_name(job: TrainingJob, index: int) -> str:
    return f"{job.name}-worker-{index}"


@dataclass(frozen=True)
class Layout:
    """What the launcher pattern reads of a job besides its Launcher: the replica type whose pods
    host the ranks, their pod names, the slots of each, the container ranks are exec'd in, and
    the ConfigMap's name suffix. MPIJob's is `MPIJOB`; a TrainJob's mpi policy has its own."""

    hosts: str
    host_name: Callable[[TrainingJob, int], str]
    slots: Callable[[TrainingJob], int]
    exec_container: Callable[[TrainingJob], str | None]
    config_suffix: str = "-config"
    # Whether the launcher is in the hostfile too (MPIJob: when it has a GPU, as upstream).
    launcher_hosts: Callable[[TrainingJob], bool] = lambda job: False

    def config_name(self, job: TrainingJob) -> str:
        return f"{job.name}{self.config_suffix}"


def _template_spec(job: TrainingJob, rtype: str) -> dict[str, Any]:
    spec = replica_spec(job, rtype)
    pod_spec = (spec.template.get("spec") if spec is not None else None) or {}
    return pod_spec if isinstance(pod_spec, dict) else {}


def _gpu_launcher(job: TrainingJob) -> bool:
    """Upstream's test: a launcher container limit named like a GPU (`*.com/gpu`, `*gpu*`)."""
    spec = replica_spec(job, LAUNCHER)
    listed = containers(spec.template) if spec is not None else []
    limits = [key for c in listed for key in ((c.get("resources") or {}).get("limits") or {})]
    return any(str(key).endswith(".com/gpu") or "gpu" in str(key) for key in limits)


def service_account(job: TrainingJob) -> str:
    return str(_template_spec(job, LAUNCHER).get("serviceAccountName") or launcher_name(job))


# --- what the kind plans besides pods ------------------------------------------------------------
def kubexec_script(layout: Layout, job: TrainingJob) -> str:
    script = f"#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n{KUBECTL_DIR}/kubectl exec ${{POD_NAME}}"
    container = layout.exec_container(job)
    if container:
        script += f" --container {container}"
    return script + ' -- /bin/sh -c "$*"'


def hostfile(layout: Layout, job: TrainingJob, workers: int) -> str:
    slots = layout.slots(job)
    lines = [f"{launcher_name(job)} slots={slots}\n"] if layout.launcher_hosts(job) else []
    hosts = [f"{layout.host_name(job, i)} slots={slots}\n" for i in range(workers)]
    return "".join(lines + hosts)


def discover_hosts(layout: Layout, job: TrainingJob, running_workers: Sequence[int]) -> str:
    """Horovod elastic's host list: the Running workers only, sorted by pod name (upstream)."""
    slots = layout.slots(job)
    script = "#!/bin/sh"
    if layout.launcher_hosts(job):
        script += f"\necho {launcher_name(job)}:{slots}\n"
    for name in sorted(layout.host_name(job, i) for i in running_workers):
        script += f"\necho {name}:{slots}"
    return script


def _meta(job: TrainingJob, name: str) -> dict[str, Any]:
    return {"name": name, "labels": {"app": job.name}}


def launcher_objects(
    layout: Layout, ctx: ClusterContext, running: Mapping[str, Sequence[int]]
) -> list[dict[str, Any]]:
    """The ConfigMap (hostfile, rsh agent, host discovery) and the launcher's RBAC. Pure."""
    job, workers = ctx.job, ctx.replicas.get(layout.hosts, 0)
    data = {
        HOSTFILE: hostfile(layout, job, workers),
        KUBEXEC: kubexec_script(layout, job),
        DISCOVER: discover_hosts(layout, job, running.get(layout.hosts, ())),
    }
    exec_rule: dict[str, Any] = {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"]}
    if workers:  # none: upstream leaves resourceNames out
        exec_rule["resourceNames"] = [layout.host_name(job, i) for i in range(workers)]
    pods_rule = {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}
    subject = {"kind": "ServiceAccount", "name": service_account(job), "namespace": job.namespace}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": launcher_name(job)}
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(job, subject["name"])},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(job, layout.config_name(job)),
         "data": data},
        {"apiVersion": rbac, "kind": "Role", "metadata": _meta(job, launcher_name(job)),
         "rules": [pods_rule, exec_rule]},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": _meta(job, launcher_name(job)),
         "subjects": [subject], "roleRef": role_ref},
    ]  # fmt: skip


# --- pods ----------------------------------------------------------------------------------------
def _config_volume(config: str, items: list[tuple[str, int]]) -> dict[str, Any]:
    paths = [{"key": key, "path": key, "mode": mode} for key, mode in items]
    return {"name": CONFIG_VOLUME, "configMap": {"name": config, "items": paths}}


def _first_container(pod: dict[str, Any]) -> dict[str, Any]:
    first: dict[str, Any] = pod["spec"]["containers"][0]
    return first


def _launcher_env(ctx: ClusterContext, agent: str, hosts: str) -> list[dict[str, Any]]:
    env = [
        env_var("OMPI_MCA_plm_rsh_agent", agent),
        env_var("OMPI_MCA_orte_default_hostfile", hosts),
    ]
    if _gpu_launcher(ctx.job):
        return env
    # Upstream blanks these so that a launcher without a GPU cannot use one by accident.
    return [*env, env_var("NVIDIA_VISIBLE_DEVICES", ""), env_var("NVIDIA_DRIVER_CAPABILITIES", "")]


def _process_env(agent: str, hosts: str) -> list[dict[str, Any]]:
    """Open MPI 5 (PRRTE) and MPICH read other names than upstream's Open MPI 4 ones."""
    return [
        env_var("PRTE_MCA_plm_ssh_agent", agent),
        env_var("PRTE_MCA_prte_default_hostfile", hosts),
        env_var("HYDRA_LAUNCHER", "rsh"),
        env_var("HYDRA_LAUNCHER_EXEC", agent),
        env_var("HYDRA_HOST_FILE", hosts),
    ]


def _decorate_launcher(layout: Layout, ctx: ClusterContext, pod: dict[str, Any]) -> None:
    main, spec = _first_container(pod), pod["spec"]
    agent = ctx.kind_options.get(EXEC_AGENT_OPTION)
    config = layout.config_name(ctx.job)
    if agent:  # a process backend: its own agent and ConfigMap directory, nothing to mount
        hosts = f"{ctx.kind_options[CONFIGMAP_DIR_OPTION]}/{config}/{HOSTFILE}"
        env = _launcher_env(ctx, str(agent), hosts) + _process_env(str(agent), hosts)
    else:
        agent, hosts = f"{CONFIG_DIR}/{KUBEXEC}", f"{CONFIG_DIR}/{HOSTFILE}"
        env = _launcher_env(ctx, agent, hosts)
        if not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = launcher_name(ctx.job)
        spec.setdefault("initContainers", []).append(_kubectl_delivery(ctx))
        mounts = [{"name": KUBECTL_VOLUME, "mountPath": KUBECTL_DIR},
                  {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR}]  # fmt: skip
        main["volumeMounts"] = [*(main.get("volumeMounts") or []), *mounts]
        items = [(KUBEXEC, SCRIPT_MODE), (HOSTFILE, HOSTFILE_MODE), (DISCOVER, SCRIPT_MODE)]
        volumes = [{"name": KUBECTL_VOLUME, "emptyDir": {}}, _config_volume(config, items)]
        spec["volumes"] = [*(spec.get("volumes") or []), *volumes]
    user_set = {e.get("name") for e in main.get("env") or []}
    env += [env_var(name, value) for name, value in
            (("I_MPI_HYDRA_BOOTSTRAP", "rsh"), ("I_MPI_HYDRA_BOOTSTRAP_EXEC", agent))
            if name not in user_set]  # fmt: skip
    main["env"] = [*(main.get("env") or []), *env]


def _kubectl_delivery(ctx: ClusterContext) -> dict[str, Any]:
    limits = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}
    image = ctx.kind_options.get(KUBECTL_IMAGE_OPTION) or "kubeflow/kubectl-delivery:latest"
    mounts = [
        {"name": KUBECTL_VOLUME, "mountPath": KUBECTL_DIR},
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR},
    ]
    return {
        "name": "kubectl-delivery",
        "image": str(image),
        "imagePullPolicy": "IfNotPresent",
        "env": [env_var("TARGET_DIR", KUBECTL_DIR), env_var("NAMESPACE", ctx.job.namespace)],
        "volumeMounts": mounts,
        "resources": {"limits": dict(limits), "requests": dict(limits)},
    }


def _decorate_worker(layout: Layout, ctx: ClusterContext, pod: dict[str, Any]) -> None:
    main = _first_container(pod)
    if ctx.kind_options.get(EXEC_AGENT_OPTION):
        return  # a process backend's agent needs no script in the worker
    # Open MPI checks for the agent's path on every rank: mount kubexec.sh here too.
    mount = {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR}
    main["volumeMounts"] = [*(main.get("volumeMounts") or []), mount]
    volume = _config_volume(layout.config_name(ctx.job), [(KUBEXEC, SCRIPT_MODE)])
    pod["spec"]["volumes"] = [*(pod["spec"].get("volumes") or []), volume]


def decorate_launcher_pod(
    layout: Layout, ctx: ClusterContext, rtype: str, index: int, pod: dict[str, Any]
) -> None:
    """The launcher: its name, the agent and hostfile in its env (and mounted on Kubernetes);
    a host: the rsh agent's script mounted (Open MPI checks the agent's path on every rank)."""
    if rtype == LAUNCHER:
        pod["metadata"]["name"] = launcher_name(ctx.job)  # upstream's: no index
        _decorate_launcher(layout, ctx, pod)
    elif rtype == layout.hosts:
        _decorate_worker(layout, ctx, pod)


# --- status, validation, defaults ----------------------------------------------------------------
def no_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    return []  # the launcher's env is a decoration of its first container (upstream's choice)


def launcher_start_after(layout: Layout, ctx: ClusterContext) -> Mapping[str, str]:
    """On Kubernetes the launcher's kubectl-delivery init container waits until every worker of
    the hostfile runs (upstream creates the launcher with the workers, which gang scheduling
    needs); a process backend has no such container: there the launcher waits for its pod."""
    return {LAUNCHER: layout.hosts} if ctx.kind_options.get(EXEC_AGENT_OPTION) else {}


def mpi_program(rtype: str, argv: Sequence[str]) -> list[str] | None:
    """The launcher runs the program under mpirun, one rank per slot of the hostfile; the
    hostfile and agent are named from the env the launcher gets (Open MPI 5 reads other names
    than upstream's Open MPI 4 env); the workers only host the ranks."""
    if rtype != LAUNCHER:
        return None
    agent, hosts = "$(OMPI_MCA_plm_rsh_agent)", "$(OMPI_MCA_orte_default_hostfile)"
    return ["mpirun", "--hostfile", hosts, "--mca", "plm_rsh_agent", agent, "--bind-to", "none",
            *argv]  # fmt: skip


def mpi_is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    return rtype == LAUNCHER


def launcher_status(
    layout: Layout, job: TrainingJob, counts: Mapping[str, ReplicaCounts]
) -> list[Verdict]:
    """The launcher decides: Running while it runs, Succeeded when it did; any failure restarts
    (ExitCode) or fails the job, the launcher's read first."""
    verdicts = []
    launcher = counts.get(LAUNCHER)
    if launcher is not None and launcher.active > 0:
        verdicts.append(Verdict(RUNNING, f"{job.kind} {job.name} is running.", LAUNCHER))
    if launcher is not None and launcher.replicas - launcher.succeeded == 0:
        done = f"{job.kind} {job.name} is successfully completed."
        return [*verdicts, Verdict(SUCCEEDED, done, LAUNCHER)]
    for rtype in (r for r in (LAUNCHER, layout.hosts) if r in counts and counts[r].failed > 0):
        restart = counts[rtype].restart_policy == RestartPolicy.EXIT_CODE
        verdicts.append(failure_verdict(job.kind, job.name, rtype, counts[rtype], restart=restart))
    return verdicts


# --- MPIJob's hooks: the launcher pattern with its Workers ---------------------------------------
MPIJOB = Layout(
    hosts=WORKER,
    host_name=worker_name,
    slots=_slots,
    exec_container=lambda job: _spec(job).main_container,
    launcher_hosts=_gpu_launcher,
)


def config_name(job: TrainingJob) -> str:
    return MPIJOB.config_name(job)


def mpi_objects(ctx: ClusterContext, running: Mapping[str, Sequence[int]]) -> list[dict[str, Any]]:
    return launcher_objects(MPIJOB, ctx, running)


def mpi_decorate_pod(ctx: ClusterContext, rtype: str, index: int, pod: dict[str, Any]) -> None:
    decorate_launcher_pod(MPIJOB, ctx, rtype, index, pod)


def mpi_start_after(ctx: ClusterContext) -> Mapping[str, str]:
    return launcher_start_after(MPIJOB, ctx)


def mpi_status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> list[Verdict]:
    return launcher_status(MPIJOB, job, counts)


def mpi_validate(job: TrainingJob) -> list[Problem]:
    spec = _spec(job)
    problems = exactly_one(job, FIELD, LAUNCHER, required=True)
    if spec.slots_per_worker is not None and spec.slots_per_worker < 1:
        # Upstream writes `slots=0` into the hostfile and mpirun fails later; say it now.
        problems.append(Problem("spec.slotsPerWorker", "must be at least 1"))
    worker = replica_spec(job, WORKER)
    names = {c.get("name") for c in containers(worker.template)} if worker is not None else set()
    if spec.main_container and worker is not None and spec.main_container not in names:
        message = f"no container {spec.main_container!r} in spec.{FIELD}.Worker to exec into"
        problems.append(Problem("spec.mainContainer", message))
    return problems


def mpi_default(job: TrainingJob) -> None:
    """runPolicy.cleanPodPolicy wins over the legacy spec.cleanPodPolicy; both end up equal."""
    spec = _spec(job)
    chosen = spec.run_policy.clean_pod_policy or spec.clean_pod_policy or CleanPodPolicy.NONE
    spec.run_policy.clean_pod_policy = spec.clean_pod_policy = chosen


KIND = Kind(
    kind="MPIJob",
    plural="mpijobs",
    job_model=MPIJob,
    replica_field=FIELD,
    replica_types=(LAUNCHER, WORKER),
    default_container="mpi",
    port_name="mpi-port",
    default_port=9999,
    default_restart_policy=RestartPolicy.NEVER,
    framework="mpi",
    env=no_env,
    is_master_role=mpi_is_master,
    primary_types=(LAUNCHER,),  # mpirun forwards every rank's output to the launcher
    status=mpi_status,
    validate=mpi_validate,
    default=mpi_default,
    decorate_pod=mpi_decorate_pod,
    objects=mpi_objects,
    start_after=mpi_start_after,
    idle_commands=((WORKER, ("sleep", "365d")),),  # a worker only hosts ranks
    program=mpi_program,
    rank_env=("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"),  # Open MPI, MPICH/Intel, PMIx
    default_replicas=((WORKER, 0),),
    services=False,
    adds_default_port=False,
    requires_default_container=False,
)
