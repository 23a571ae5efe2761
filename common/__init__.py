"""The floor: code every app shares and that depends on no app.

Errors and their handler, public ids, strict serializer fields, validation,
parsers, OpenAPI helpers, prepared statements, the request gate, body rules,
scrubbing, markdown rendering, the admin kit and ``limits`` (every length
limit and pattern). It imports Django, DRF and third-party libraries only:
never ``mailbox``, ``rooms`` or ``plumb_site`` (``tests/test_layout.py``).
"""
