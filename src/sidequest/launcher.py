"""`sidequest.launcher`, a documented import path: the code lives in `sidequest.worker.launcher`."""

import sys

from sidequest.worker import launcher as _code
from sidequest.worker.launcher import *  # noqa: F403  (what a type checker reads)

sys.modules[__name__] = _code  # one module under both names: patching either patches the code
