"""Build script for the optional C kernel of the XSpace reader; the package's metadata is in pyproject.toml.

``tfprof_towers.xplane._wirec`` walks the wire format in C (see tfprof_towers/xplane/native.py).  It is
optional: where it cannot be compiled (no C compiler), the install goes on and the numpy decoder runs.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tfprof_towers.xplane._wirec",
            ["tfprof_towers/xplane/_wirec.c"],
            optional=True,  # Python's own compiler flags: -O3 where it was built with gcc or clang
        )
    ]
)
