"""The messages' full-text index (SPEC §9), filled with every message already stored.

The index lives outside the ORM (common/search/index.py): an FTS5 table and
its queue on SQLite, a tsvector table with a GIN index on PostgreSQL, and
triggers that delete a message's row with the message. Existing messages are indexed here,
in batches, so an upgraded server finds its old history at once.
"""

from django.db import migrations

from common.search.index import SearchIndex

INDEX = SearchIndex(table="rooms_message_search", source="rooms_message", key="message_id")


def create(apps, schema_editor):
    INDEX.create(schema_editor)
    INDEX.fill(schema_editor.connection)


def drop(apps, schema_editor):
    INDEX.drop(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("rooms", "0009_people_and_policy")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
