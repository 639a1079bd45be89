"""plain: no framework source in the runtime; every node runs the command, no contract env."""

from __future__ import annotations

from trainop_core.runtimes.policies.base import MLPolicy

POLICY = MLPolicy(name="plain", port=29500)
