"""Sets Django up on import: `manage.py sidequest worker` passes `-r sidequest.contrib.django.boot`
first, since a `--processes` child is a fresh `python -m sidequest.cli worker` interpreter
(`DJANGO_SETTINGS_MODULE` comes with the environment). In the process `manage.py` started,
Django is already set up and this does nothing."""

import django
from django.apps import apps

if not apps.ready:
    django.setup()
