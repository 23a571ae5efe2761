"""The notes' full-text index (SPEC §9), filled with every note already stored.

The index lives outside the ORM (common/search/index.py): an FTS5 table and
its queue on SQLite, a tsvector table with a GIN index on PostgreSQL, and
triggers that delete a note's row with the note. Existing notes are indexed here, in
batches, so an upgraded server finds its old threads at once.
"""

from django.db import migrations

from common.search.index import SearchIndex

INDEX = SearchIndex(table="mailbox_note_search", source="mailbox_note", key="note_id")


def create(apps, schema_editor):
    INDEX.create(schema_editor)
    INDEX.fill(schema_editor.connection)


def drop(apps, schema_editor):
    INDEX.drop(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("mailbox", "0015_people_and_policy")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
