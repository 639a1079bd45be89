"""The Ray backend: jobs gang-placed on a Ray cluster (`pip install 'trainop[ray]'`).

Importing this package imports Ray; `trainop_core` imports it only when the "ray" backend is
asked for.
"""

from trainop_core.backends.ray.backend import RayBackend
from trainop_core.backends.ray.files import UploadLimits, UploadRefused

__all__ = ["RayBackend", "UploadLimits", "UploadRefused"]
