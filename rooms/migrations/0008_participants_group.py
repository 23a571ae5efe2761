"""The participants group: people who take part from the admin (post, review and
answer notes) but neither moderate nor operate; and the moderators, who take part
too (SPEC §5.1)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

# Reading rooms (their transcripts are where people post) and taking part.
PARTICIPANT_PERMISSIONS = {
    "rooms": ["view_room", "view_member", "view_message", "view_event"],
    "mailbox": ["take_part"],
}
# What the moderators' group (0003) gains.
MODERATOR_GAINS = {"mailbox": ["take_part"]}


def _permissions(apps, wanted):
    Permission = apps.get_model("auth", "Permission")
    found = []
    for app_label, codenames in wanted.items():
        found += Permission.objects.filter(
            content_type__app_label=app_label, codename__in=codenames
        )
    return found


def create_participants(apps, schema_editor):
    # As in 0003: permissions are created after all migrations ran, so create
    # them now for the groups to be given them in this same migrate.
    for app_label in PARTICIPANT_PERMISSIONS:
        app_config = apps.get_app_config(app_label)
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    participants, _ = Group.objects.get_or_create(name="participants")
    participants.permissions.add(*_permissions(apps, PARTICIPANT_PERMISSIONS))
    moderators = Group.objects.filter(name="moderators").first()
    if moderators is not None:
        moderators.permissions.add(*_permissions(apps, MODERATOR_GAINS))


def remove_participants(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.filter(name="participants").delete()
    moderators = Group.objects.filter(name="moderators").first()
    if moderators is not None:
        moderators.permissions.remove(*_permissions(apps, MODERATOR_GAINS))


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("mailbox", "0014_people_and_their_handles"),
        ("rooms", "0007_reviews_have_idempotency_keys"),
    ]

    operations = [migrations.RunPython(create_participants, remove_participants)]
