"""How many replicas this machine may start for one job: refused before anything is allocated.

Each replica is at least one process (a Python one needs ~30 MiB). A job asking for more than the
machine can start would otherwise fill memory while it allocates ports under the ports lock,
blocking every other job. The limit is the smallest of: physical memory / 32 MiB, half the
per-user process limit, and 4096; `TRAINOP_LOCAL_MAX_REPLICAS` sets it instead.
"""

from __future__ import annotations

import contextlib
import os
import resource

from trainop_core.errors import InvalidJobError, Problem

MAX_REPLICAS_ENV = "TRAINOP_LOCAL_MAX_REPLICAS"
MEMORY_PER_REPLICA = 32 * 1024 * 1024
HARD_CAP = 4096


def machine_limit() -> int:
    """The default: what this machine's memory and process limit allow, at most HARD_CAP."""
    limits = [HARD_CAP]
    with contextlib.suppress(OSError, ValueError):  # no such sysconf name here
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        limits.append(memory // MEMORY_PER_REPLICA)
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if processes != resource.RLIM_INFINITY:
        limits.append(processes // 2)
    return max(1, min(limits))


def replica_limit() -> int:
    """The limit in force: `TRAINOP_LOCAL_MAX_REPLICAS` if set, else `machine_limit()`."""
    configured = os.environ.get(MAX_REPLICAS_ENV, "").strip()
    if not configured:
        return machine_limit()
    digits = configured.isascii() and configured.isdigit() and len(configured) <= 10
    if not (digits and 0 < int(configured) < 2**31):
        problem = Problem(
            "", f"{MAX_REPLICAS_ENV}={configured[:40]!r}: expected a positive integer"
        )
        raise InvalidJobError([problem])
    return int(configured)


def replica_limit_problems(total: int, replica_field: str) -> list[Problem]:
    """A problem if a job of `total` replicas is more than this machine may start."""
    limit = replica_limit()
    if total <= limit:
        return []
    message = (
        f"the job has {total} replicas; the local backend starts at most {limit} on this "
        f"machine (one process each; set {MAX_REPLICAS_ENV} to change the limit)"
    )
    return [Problem(f"spec.{replica_field}", message)]
