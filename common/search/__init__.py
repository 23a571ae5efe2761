"""Full-text search (SPEC §9): the language, the words, the index, the snippets.

* ``text``: how a text becomes folded words, the same for index, query and snippet;
* ``query``: plumb's query language parsed into a small tree (``invalid_query``);
* ``index``: an index table per kind of text, on SQLite (FTS5) and PostgreSQL
  (``tsvector`` with GIN), and the query compiled to each;
* ``snippets``: the matched words of a stored text, in context.

The apps own their indexes (``rooms.models.MESSAGE_INDEX``,
``mailbox.models.NOTE_INDEX``); who may read what is ``rooms.selectors.search``'s.
"""
