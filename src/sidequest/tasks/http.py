"""`sidequest.tasks.http`, a documented import path: the code lives in `sidequest.features.tasks.http`."""

import sys

from sidequest.features.tasks import http as _code
from sidequest.features.tasks.http import *  # noqa: F403  (what a type checker reads)

sys.modules[__name__] = _code  # one module under both names: patching either patches the code
