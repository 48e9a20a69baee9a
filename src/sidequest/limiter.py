"""`sidequest.limiter`, a documented import path: the code lives in `sidequest.features.limiter`."""

import sys

from sidequest.features import limiter as _code
from sidequest.features.limiter import *  # noqa: F403  (what a type checker reads)
from sidequest.features.limiter import __all__ as __all__

sys.modules[__name__] = _code  # one module under both names: patching either patches the code
