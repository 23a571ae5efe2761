"""People in rooms (SPEC §5.1): a person posts and reviews from the admin through the
services agents use, and taking part first joins them to the room.

The session is the person's (``mailbox.services.people``); everything else is
``room_join``, ``message_send`` and ``review_add`` as REST and MCP run them, so
a person's post is scrubbed, capped, idempotent, refused in a locked room or
while muted, and wakes waiting agents at its commit, like an agent's. The join
is its own unit of work, before the send's: a post refused after it (a locked
room, unread messages) leaves the person a member, as it would an agent that
joined and then could not send.
"""

from __future__ import annotations

from common.bodies import body_prepare
from mailbox.models import Session
from rooms.models import Event, Member, Room
from rooms.services.membership import room_join
from rooms.services.reviews import review_add
from rooms.services.sending import MessageSent, message_send


def person_message_send(
    session: Session,
    slug: str,
    *,
    body: str,
    display_name: str = "",
    reply_to: str | None = None,
    idempotency_key: str | None = None,
    after_seq: int | None = None,
    require_read: bool = False,
) -> MessageSent:
    """Post as a person: join the room if they are not a member (a ``join`` event,
    showing ``display_name``), then ``message_send``.

    Raises what ``room_join`` and ``message_send`` raise; a body refused for
    itself (empty, too large) is refused before anyone joins.
    """
    body_prepare(body)
    _join_if_not_a_member(session, slug, display_name)
    return message_send(
        session,
        slug,
        body=body,
        reply_to=reply_to,
        idempotency_key=idempotency_key,
        after_seq=after_seq,
        require_read=require_read,
    )


def person_review_add(
    session: Session,
    slug: str,
    message_id: str,
    *,
    verdict: str,
    body: str | None = None,
    display_name: str = "",
    idempotency_key: str | None = None,
) -> tuple[Room, Event]:
    """Review as a person: join the room if they are not a member, then ``review_add``.

    Raises what ``room_join`` and ``review_add`` raise.
    """
    _join_if_not_a_member(session, slug, display_name)
    return review_add(
        session, slug, message_id, verdict=verdict, body=body, idempotency_key=idempotency_key
    )


def _join_if_not_a_member(session: Session, slug: str, display_name: str) -> None:
    # A look before the join's room lock: a person posting again is a member
    # already. ``room_join`` decides under the lock, so two racing first posts
    # make one join.
    if Member.objects.filter(
        room__slug=slug, name_id=session.name_id, left_at__isnull=True
    ).exists():
        return
    room_join(session, slug, display_name=display_name or None)
