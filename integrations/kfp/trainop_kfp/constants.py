"""Settings the KFP components share: what they run in is said here and nowhere else.

Every component runs in a stock Python image and installs trainop at start, as KFP's lightweight
components do (`pip install kfp==<the compiling SDK's version> --no-deps`, then PACKAGE): no image
of ours has to exist. PACKAGE pins this very release on PyPI, so a pipeline compiled with trainop
X runs trainop X; the release publishes that package. To run an unreleased build or a fork, set
`TRAINOP_KFP_PACKAGE` to any pip requirement (a wheel URL, `trainop @ git+https://...@<commit>`)
when the pipeline is compiled: it is written into the compiled YAML.
"""

from __future__ import annotations

import os

from trainop_core import __version__

# The image every component runs in: any image with Python 3.10+ and pip works.
IMAGE = "python:3.11-slim"

# The pip requirement that installs trainop (with its kubernetes client) in that image.
PACKAGE_ENV = "TRAINOP_KFP_PACKAGE"
PACKAGE = os.environ.get(PACKAGE_ENV) or f"trainop=={__version__}"

# What `backend` defaults to: on a pipeline cluster the job is a custom resource next to the task.
DEFAULT_BACKEND = "kubernetes"

# A day: KFP's own default has no limit, the old launchers' was 24 h. 0 means no limit.
DEFAULT_TIMEOUT_SECONDS = 86400

# Annotation of a job file giving defaults (and so types) of its `${trialParameters.NAME}`s.
PARAMETERS_ANNOTATION = "trainop.io/parameters"
