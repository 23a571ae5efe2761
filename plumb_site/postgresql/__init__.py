"""PostgreSQL: Django's backend, with a health check that costs no round trip on a quiet connection.

``CONN_HEALTH_CHECKS`` has Django run ``SELECT 1`` on a kept connection
before the first statement of each request, so that a connection the
server closed while it sat idle (a restart, ``pg_terminate_backend``, an
idle timeout) is opened again rather than failing the request. That is a
round trip per request: on this host 28 to 70 µs of the client's CPU, and
PostgreSQL's backend's to answer it, close to a tenth of the floor's CPU
(``docs/internals.md``).

A server that closes a connection says so on its socket: it sends its
reason (``FATAL``) and closes, and the socket turns readable. A connection
kept between requests has nothing in flight, so a socket with nothing to
read is one the server has not closed, and the check needs no round trip;
anything to read, or any doubt (an error since the last check, a
transaction left open), is Django's ``SELECT 1``. A connection
whose peer vanished without closing (a cable cut) is not found either way:
``SELECT 1`` would wait on it as long as the request's own statement.
"""
