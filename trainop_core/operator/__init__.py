"""The Kubernetes operator: `python -m trainop_core.operator` or `trainop operator`.

Importing this package is cheap; `Manager` (the informers, the HTTP connection) loads on first use,
so `trainop --help` stays fast. Neither imports the official `kubernetes` client: the operator
speaks HTTP itself (`connection.py`) and reads kubeconfigs itself (`kubeconfig.py`, exec plugins in
`execcred.py`), honouring every key of the context in use or refusing to start, naming the key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainop_core.operator.options import Options, add_flags, options_from_args
from trainop_core.operator.run import main, run_from_args

if TYPE_CHECKING:
    from trainop_core.operator.manager import Manager

__all__ = ["Manager", "Options", "add_flags", "main", "options_from_args", "run_from_args"]


def __getattr__(name: str) -> Any:
    if name == "Manager":
        from trainop_core.operator.manager import Manager

        return Manager
    raise AttributeError(name)
