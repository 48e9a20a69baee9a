"""`sidequest.tasks`, a documented import path: the code lives in `sidequest.features.tasks`."""

from sidequest.features.tasks import *  # noqa: F403  (what a type checker reads)
from sidequest.features.tasks import __all__ as __all__
