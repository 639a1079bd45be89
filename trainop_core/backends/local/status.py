"""Reading job status on the wire form (dicts), and the one status the supervisor writes itself.

Everything else about status is the planner's; the only exception is a job stopped by its user
(Ctrl-C on `trainop run`, a timeout), which no planner input expresses. Even then the condition
is set by the planner's own `set_condition`, so the rules stay in one place.
"""

from __future__ import annotations

from trainop_core.planner.conditions import failed_status
from trainop_core.planner.conditions import is_finished_wire as is_finished

__all__ = ["failed_status", "is_finished"]
