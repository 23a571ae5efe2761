from django.db import migrations, models


class Migration(migrations.Migration):
    """Up to four waiting calls per session: the ticket column holds the newest."""

    dependencies = [
        ("mailbox", "0010_generated_names_are_disposable"),
    ]

    operations = [
        migrations.RenameField(
            model_name="session",
            old_name="poll_ticket",
            new_name="poll_tickets",
        ),
        migrations.AlterField(
            model_name="session",
            name="poll_tickets",
            field=models.CharField(blank=True, default="", editable=False, max_length=128),
        ),
    ]
