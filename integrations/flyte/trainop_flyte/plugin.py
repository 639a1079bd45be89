"""The `flytekit.plugins` entry point: flytekit imports this module when it starts.

flytekit's registries (TaskPlugins for `@task(task_config=...)`, ConnectorRegistry for
`pyflyte serve connector`) are filled by importing plugin modules; that is flytekit's extension
mechanism, so registration happens here, once, through idempotent functions.
"""

from __future__ import annotations

from trainop_flyte import connector, task


def register_all() -> None:
    """Register the task type and its connector with flytekit (idempotent)."""
    task.register()
    connector.register()


register_all()
