"""Settings of the example shop. SHOP_DB (an SQLite file) and SHOP_REDIS_URL come from the
environment; the tests set both, and SHOP_SIDEQUEST (JSON) to add SIDEQUEST settings."""

import json
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = os.environ.get("SHOP_DEBUG") == "1"  # a new project's settings have DEBUG = True
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "sidequest.contrib.django",
    "orders",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "shopsite.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SHOP_DB", BASE_DIR / "db.sqlite3"),
        "OPTIONS": {"timeout": 30},  # a worker and the web process write to the same file
    }
}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

SIDEQUEST = {
    "redis_url": os.environ.get("SHOP_REDIS_URL", "redis://localhost:6379/0"),
    "queues": ["orders", "default"],
    "concurrency": 2,
    **json.loads(os.environ.get("SHOP_SIDEQUEST", "{}")),
}

TASKS = {
    "default": {
        "BACKEND": "sidequest.contrib.django.TasksBackend",
        "QUEUES": ["default", "orders"],
        "OPTIONS": {"result_ttl": 3600},
    }
}
