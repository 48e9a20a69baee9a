"""`sidequest.aio`, a documented import path: the code lives in `sidequest.client.async_client`."""

import sys

from sidequest.client import async_client as _code
from sidequest.client.async_client import *  # noqa: F403  (what a type checker reads)
from sidequest.client.async_client import __all__ as __all__

sys.modules[__name__] = _code  # one module under both names: patching either patches the code
