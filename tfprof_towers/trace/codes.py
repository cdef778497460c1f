"""Event categories as int8 codes: an event's code is its category's index in
:data:`~tfprof_towers.categories.EVENT_CATEGORIES` (the ``category`` column's dtype)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..categories import EVENT_CATEGORIES

CATEGORY_DTYPE = pd.CategoricalDtype(list(EVENT_CATEGORIES))
#: category -> its int8 code
CAT: dict[str, np.int8] = {c: np.int8(i) for i, c in enumerate(EVENT_CATEGORIES)}
