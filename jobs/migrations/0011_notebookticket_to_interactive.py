# NotebookTicket moved to the interactive app (issue 43): the table stays; the interactive
# app's 0001 takes the model over and renames the table.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0010_alter_job_code_snapshot"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="NotebookTicket")],
            database_operations=[],
        ),
    ]
