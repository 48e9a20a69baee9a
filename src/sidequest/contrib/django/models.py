"""The dashboard's permission, `sidequest.manage_jobs`: who may act in it (retry, delete, pause,
...), where staff may only look (see `dashboard`).

Django keeps permissions per model, so the permission hangs on a model without a table
(`managed = False`): nothing is stored, `migrate` only creates the permission, which the admin
grants to users and groups as any other. Superusers have it, as every permission.
"""

from __future__ import annotations

from django.db import models

MANAGE = "manage_jobs"
MANAGE_PERMISSION = f"sidequest.{MANAGE}"  # what `user.has_perm` is asked


class Dashboard(models.Model):
    """No rows, no table: the holder of the dashboard's permission."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [  # noqa: RUF012 (Django reads it from Meta)
           (MANAGE, "Can act in the sidequest dashboard (retry, delete, pause, ...)")]
