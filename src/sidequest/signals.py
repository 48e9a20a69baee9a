"""`sidequest.signals`, a documented import path: the code lives in `sidequest.worker.signals`."""

import sys

from sidequest.worker import signals as _code
from sidequest.worker.signals import *  # noqa: F403  (what a type checker reads)

sys.modules[__name__] = _code  # one module under both names: patching either patches the code
