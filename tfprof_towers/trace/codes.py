"""Event categories as int8 codes: an event's code is its category's index in
:data:`~tfprof_towers.vocab.categories.EVENT_CATEGORIES` (the ``category`` column's dtype,
:func:`category_dtype`; ``CATEGORY_DTYPE`` is the same, made on first use so that the
analysis never imports pandas unless a frame is asked for)."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from tfprof_towers.vocab.categories import EVENT_CATEGORIES

#: category -> its int8 code
CAT: dict[str, np.int8] = {c: np.int8(i) for i, c in enumerate(EVENT_CATEGORIES)}


@cache
def category_dtype() -> Any:
    import pandas as pd

    return pd.CategoricalDtype(list(EVENT_CATEGORIES))


def __getattr__(name: str) -> Any:
    if name == "CATEGORY_DTYPE":
        return category_dtype()
    raise AttributeError(name)
