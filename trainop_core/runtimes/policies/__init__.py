"""ML policies: one module per framework, each a frozen `MLPolicy`; the table in `table.py`."""
