"""The moderators group: may moderate rooms and conversations, and read the
audit trail; may not see or change projects, opt-ins, keys or collab settings."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

MODERATOR_PERMISSIONS = {
    "rooms": [
        "view_room",
        "change_room",
        "view_member",
        "change_member",
        "view_message",
        "change_message",
        "view_event",
    ],
    "mailbox": [
        "view_conversation",
        "change_conversation",
        "view_note",
        "view_auditrecord",
    ],
}


def create_moderators(apps, schema_editor):
    # Permissions are normally created after all migrations ran; create them
    # now so that the group can be given them in this same migrate.
    for app_label in MODERATOR_PERMISSIONS:
        app_config = apps.get_app_config(app_label)
        # The migration state's app stub has no models module; create_permissions
        # only checks that it is set, and reads the models from ``apps``.
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="moderators")
    for app_label, codenames in MODERATOR_PERMISSIONS.items():
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
        )


def remove_moderators(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="moderators").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("mailbox", "0004_anchor_patterns_at_end"),
        ("rooms", "0002_anchor_patterns_at_end"),
    ]

    operations = [migrations.RunPython(create_moderators, remove_moderators)]
