"""What-if projection of placement variants on hardware profiles (see :mod:`.api`).

Importing this package never imports TensorFlow; only :mod:`.graphcost`, run in a
child process, does.
"""

from tfprof_towers.projection.api import PROJECTION_JSON, project, project_run
from tfprof_towers.projection.hardware import Hardware, HardwareError, builtin_names, load_hardware

__all__ = [
    "PROJECTION_JSON",
    "Hardware",
    "HardwareError",
    "builtin_names",
    "load_hardware",
    "project",
    "project_run",
]
