"""The frames a :class:`~tfprof_towers.frames.profile.Profile` has, in the order files are written
(their columns and dtypes: :data:`tfprof_towers.frames.schema.COLUMNS`).  No pandas."""

FRAMES: tuple[str, ...] = ("events", "steps", "wall", "total", "idle", "links", "findings", "variants",
                           "step_times", "losses", "placement", "memory")
