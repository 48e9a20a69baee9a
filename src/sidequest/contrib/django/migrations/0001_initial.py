"""The dashboard's permission (see `models`): a model without a table, so nothing is created but it."""

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar = [
        migrations.CreateModel(
            name="Dashboard",
            fields=[("id", models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"))],
            options={
                "managed": False,
                "default_permissions": (),
                "permissions": [("manage_jobs", "Can act in the sidequest dashboard (retry, delete, pause, ...)")],
            },
        ),
    ]
