"""mpi: Trainer's launcher and nodes. The launcher runs the trainer's command (mpirun), which
starts `numProcPerNode` ranks (the hostfile's slots) in every node through trainop's rsh agent:
MPIJob's launcher pattern with the nodes as hosts, so no ssh keys are needed."""

from __future__ import annotations

from trainop_core.api import trainjob as v2
from trainop_core.api.job import TrainingJob
from trainop_core.kinds.mpi import Layout
from trainop_core.planner.addressing import replica_name
from trainop_core.runtimes.policies.base import NODE, MLPolicy


def _slots(job: TrainingJob) -> int:
    slots = getattr(job.spec, "num_proc_per_node", 1)
    return slots if isinstance(slots, int) else 1  # translate makes it a count


def _launcher_is_node(job: TrainingJob) -> bool:
    return bool(getattr(job.spec, "launcher_is_node", False))  # runLauncherAsNode


LAYOUT = Layout(
    hosts=NODE,
    host_name=lambda job, index: replica_name(job.name, NODE, index),
    slots=_slots,
    exec_container=lambda job: v2.NODE,
    config_suffix="-mpi-hostfile",  # Trainer's name for it
    launcher_hosts=_launcher_is_node,
)
# Trainer's MPIReservedEnvNames, and the launcher's rsh agent and hostfile variables trainop
# sets for Open MPI 4 and 5 and MPICH (`kinds.mpi`; Intel MPI's a job may set itself).
RESERVED = frozenset({
    "OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args", "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots", "OMPI_MCA_plm_rsh_agent", "PRTE_MCA_plm_ssh_agent",
    "PRTE_MCA_prte_default_hostfile", "HYDRA_LAUNCHER", "HYDRA_LAUNCHER_EXEC", "HYDRA_HOST_FILE",
})  # fmt: skip
POLICY = MLPolicy(name="mpi", port=9999, launcher=LAYOUT, reserved_env=RESERVED)
