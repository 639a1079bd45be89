"""Settings the KFP components share; the lead bumps IMAGE with each release."""

from __future__ import annotations

# The image every component runs in: Python, kfp, and trainop (so `install_kfp_package=False`).
IMAGE = "ghcr.io/trainop/trainop:0.1.0"

# What `backend` defaults to: on a pipeline cluster the job is a custom resource next to the task.
DEFAULT_BACKEND = "kubernetes"

# A day: KFP's own default has no limit, the old launchers' was 24 h.
DEFAULT_TIMEOUT_SECONDS = 86400

# Annotation of a job file giving defaults (and so types) of its `${trialParameters.NAME}`s.
PARAMETERS_ANNOTATION = "trainop.io/parameters"
