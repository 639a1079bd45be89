"""A Flyte workflow whose training step is a real PyTorchJob: 1 master + 2 workers (gloo, CPU).

Run it on this machine (every replica its own process, the trainop local backend):

    pyflyte run examples/flyte/ddp_workflow.py wf --epochs 3

On a cluster the same task is submitted by the trainop connector (`pyflyte serve connector`).
"""

from __future__ import annotations

import os

from flytekit import task, workflow
from trainop_flyte import PyTorch, RunPolicy


@task(task_config=PyTorch(workers=2, run_policy=RunPolicy(backoff_limit=0)))
def train(epochs: int, lr: float) -> dict[str, float]:
    """Data-parallel logistic regression on a synthetic problem; every replica runs this."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the job
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 8, generator=generator)
    y = (x.sum(dim=1) > 0).float()
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimiser = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        optimiser.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), y)
        loss.backward()  # gradients are all-reduced across the replicas here
        optimiser.step()
    stats = torch.tensor([loss.item(), float(rank)])
    dist.all_reduce(stats)
    dist.destroy_process_group()
    return {
        "world_size": float(world),
        "mean_loss": stats[0].item() / world,
        "rank_sum": stats[1].item(),
        "pid": float(os.getpid()),
    }


@task
def summarise(metrics: dict[str, float]) -> str:
    return (
        f"world_size={metrics['world_size']:.0f} rank_sum={metrics['rank_sum']:.0f} "
        f"mean_loss={metrics['mean_loss']:.4f}"
    )


@workflow
def wf(epochs: int = 5, lr: float = 0.1) -> str:
    return summarise(metrics=train(epochs=epochs, lr=lr))
