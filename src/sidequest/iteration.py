"""`sidequest.iteration`, a documented import path: the code lives in `sidequest.features.iteration`."""

import sys

from sidequest.features import iteration as _code
from sidequest.features.iteration import *  # noqa: F403  (what a type checker reads)
from sidequest.features.iteration import __all__ as __all__

sys.modules[__name__] = _code  # one module under both names: patching either patches the code
