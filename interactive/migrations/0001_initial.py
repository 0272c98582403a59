# NotebookTicket, moved here from jobs (issue 43): the model takes over jobs' table (state
# only), then the table is renamed to this app's name. Redeemed tickets are kept.

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("jobs", "0011_notebookticket_to_interactive"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="NotebookTicket",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("nonce", models.CharField(max_length=64, unique=True)),
                        ("redeemed_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                    ],
                    options={"db_table": "jobs_notebookticket"},
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name="notebookticket", table=None),
    ]
