"""The one table of built-in ML policies, built by a function (no import-time registry)."""

from __future__ import annotations

from trainop_core.runtimes.policies import jax, mpi, plain, torch, xgboost
from trainop_core.runtimes.policies.base import MLPolicy


def builtin_policies() -> dict[str, MLPolicy]:
    """Policy name -> policy, for every framework trainop ships."""
    return {p.name: p for p in (torch.POLICY, xgboost.POLICY, jax.POLICY, mpi.POLICY, plain.POLICY)}
