"""`sidequest.periodic`, a documented import path: the code lives in `sidequest.features.periodic`."""

import sys

from sidequest.features import periodic as _code
from sidequest.features.periodic import *  # noqa: F403  (what a type checker reads)
from sidequest.features.periodic import __all__ as __all__

sys.modules[__name__] = _code  # one module under both names: patching either patches the code
