"""Kubeflow Trainer v2 on trainop's core: a TrainJob plus its runtime becomes one planned job.

`policies/` holds one small module per ML policy (torch, xgboost, jax, mpi, plain), `kind.py`
the one internal kind the planner drives them through, `translate.py` the TrainJob + runtime ->
planned job step, `catalog.py` where runtimes come from, `status.py` the status in Trainer's
terms.
"""
