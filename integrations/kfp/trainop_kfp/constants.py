"""Settings the KFP components share: what they run in is said here and nowhere else.

Every component runs in a stock Python image and installs trainop at start, as KFP's lightweight
components do (`pip install kfp==<the compiling SDK's version> --no-deps`, then trainop): no image
of ours has to exist, and no package index is asked for trainop. By default the component's
command carries a wheel of the very trainop that compiled the pipeline (`trainop_kfp.wheel`); its
dependencies (trainop's requirements outside any extra) come from the pod's index as for any
release. To install a build of your own instead (a wheel URL, `trainop[ray] @ https://...`), set
`TRAINOP_KFP_PACKAGE` to that pip requirement when the pipeline is compiled: it is written into
the compiled YAML, and no wheel is embedded.
"""

from __future__ import annotations

import os

# The image every component runs in: any image with Python 3.10+ and pip works.
IMAGE = "python:3.11-slim"

# The pip requirement that installs trainop in that image, when the user gives one at compile time;
# empty (the default): the component carries the wheel of the trainop that compiles it.
PACKAGE_ENV = "TRAINOP_KFP_PACKAGE"
PACKAGE = os.environ.get(PACKAGE_ENV, "").strip()

# What `backend` defaults to: on a pipeline cluster the job is a custom resource next to the task.
DEFAULT_BACKEND = "kubernetes"

# A day: KFP's own default has no limit, the old launchers' was 24 h. 0 means no limit.
DEFAULT_TIMEOUT_SECONDS = 86400

# Annotation of a job file giving defaults (and so types) of its `${trialParameters.NAME}`s.
PARAMETERS_ANNOTATION = "trainop.io/parameters"
