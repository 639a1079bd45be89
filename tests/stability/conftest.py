"""Property-based tests of hostile input. Runs are derandomised (the same examples every time,
so CI is reproducible) and keep no example database; `HYPOTHESIS_PROFILE=explore` searches anew
with more examples."""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

settings.register_profile(
    "trainop-ci",
    derandomize=True,
    database=None,
    deadline=timedelta(seconds=10),  # a loaded 2-core machine; a hang still fails
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("explore", parent=settings.get_profile("trainop-ci"), derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "trainop-ci"))
