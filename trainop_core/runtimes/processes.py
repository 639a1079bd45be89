"""How many processes each node starts (`numProcPerNode`), as Trainer v2.3 decides it. Pure.

torch: the TrainJob's `trainer.numProcPerNode`, else "auto" (a runtime of Trainer v2.0/v2.1 may
still give a count, or "auto", in `torch.numProcPerNode`). "auto" is what Trainer's torch plugin
makes of the node's resources (the TrainJob's `resourcesPerNode`, else the runtime's `node`
container's): its GPUs (requested, else limited: any resource whose name holds "gpu"), else its
CPUs (the request, else the limit, a fraction counting as a whole CPU), at least 1. Where there
are GPUs Trainer hands torchrun the word "auto", which then starts one process per GPU it sees;
the count is written here instead, so that every backend starts as many as a node with those
GPUs would. mpi: the TrainJob's count, else the runtime's `mpi.numProcPerNode` (the hostfile's
slots). Other policies: the TrainJob's count, else 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.gang import parse_quantity

INT32_MAX = 2**31 - 1  # Trainer's numProcPerNode is an int32


def processes_per_node(
    trainer: v2.Trainer, ml: v2.MLPolicy, resources: Mapping[str, Any] | None
) -> int:
    """The count for a node with `resources` (its `node` container's V1ResourceRequirements)."""
    if trainer.num_proc_per_node is not None:
        return trainer.num_proc_per_node
    if ml.mpi is not None:
        return ml.mpi.num_proc_per_node
    if ml.torch is None:
        return 1
    legacy = ml.torch.num_proc_per_node
    return legacy if isinstance(legacy, int) else auto_processes(resources)


def auto_processes(resources: Mapping[str, Any] | None) -> int:
    """Trainer's "auto" for a node with these resources (see the module docstring)."""
    requests, limits = (dict((resources or {}).get(f) or {}) for f in ("requests", "limits"))
    gpus = _gpus(requests) or _gpus(limits)
    if gpus:
        return gpus
    cpu = requests.get("cpu")
    if cpu is None or _whole(cpu) == 0:
        cpu = limits.get("cpu", 0)
    return max(1, _whole(cpu))


def _gpus(resources: Mapping[str, Any]) -> int:
    found = next((v for k, v in resources.items() if "gpu" in str(k).lower()), 0)
    return _whole(found)


def _whole(quantity: Any) -> int:
    """A quantity rounded up to a whole number, as Kubernetes' Quantity.Value(), within int32."""
    value = parse_quantity(quantity).to_integral_value(rounding=ROUND_CEILING)
    return int(min(max(value, Decimal(0)), Decimal(INT32_MAX)))
