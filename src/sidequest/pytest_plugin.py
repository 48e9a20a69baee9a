"""`sidequest.pytest_plugin`, a documented import path: the code lives in `sidequest.testing.pytest_plugin`."""

import sys

from sidequest.testing import pytest_plugin as _code
from sidequest.testing.pytest_plugin import *  # noqa: F403  (what a type checker reads)

sys.modules[__name__] = _code  # one module under both names: patching either patches the code
