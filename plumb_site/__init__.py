"""The roof: settings, URLs, the WSGI/ASGI entry points, middleware, the SQLite backend, MCP.

It may import every app; nothing imports it but itself, ``manage.py``,
``bench/`` and tests (``tests/test_layout.py``). What the floor needs from
here it gets by name through settings (the database engine, the REST
framework classes, ``PLUMB_PUBLISHED_SCHEMAS``), never by an import.
"""
