"""People in rooms (SPEC §5.1; issue 28, items 2 and 4): a person's post and review run
the services agents' run, taking part joins them, and agents see ``human``.
"""

import pytest

from common.errors import BodyTooLarge, ValidationFailed
from mailbox import services as mailbox_services
from mailbox.models import AgentName
from rooms import services
from rooms.errors import (
    MemberMuted,
    NotAMember,
    ReviewIdempotencyKeyReused,
    RoomLocked,
    UnreadMessages,
)
from rooms.models import Event, Member, Message, MessageMention
from rooms.selectors import member_get_for_operator
from tests.conftest import client_for
from tests.factories import (
    PersonFactory,
    ProjectFactory,
    SessionFactory,
    UserFactory,
    WorkspaceFactory,
)
from tests.rooms.messaging import GITHUB_TOKEN, REDACTED, send

pytestmark = pytest.mark.django_db


@pytest.fixture
def ada():
    return PersonFactory(user=UserFactory(username="ada", first_name="Ada", last_name="L."))


def post(person, body="Bob owns parser.py; alice takes lexer.py.", **options):
    return services.person_message_send(
        person.session, "general", body=body, display_name="Ada L.", **options
    )


def kinds(room_slug="general") -> list[str]:
    return list(Event.objects.filter(room__slug=room_slug).values_list("kind", flat=True))


def test_a_persons_first_post_joins_them_and_agents_see_a_human(general, ada, alice):
    sent = post(ada, body=f"Ownership settled. Token was {GITHUB_TOKEN}")

    assert kinds() == ["join", "join", "join", "message"]
    assert sent.message.body == f"Ownership settled. Token was {REDACTED}"
    assert sent.scrubbed == [{"kind": "github_token", "count": 1}]
    events = client_for(alice).get("/api/v1/rooms/general/messages/").json()["events"]
    join, message = events
    assert join["actor"] == {
        "handle": "ada",
        "display_name": "Ada L.",
        "display_name_visible": "Ada L.",
        "kind": "human",
    }
    assert message["message"]["author"]["kind"] == "human"
    assert message["message"]["body"] == sent.message.body
    assert message["actor"]["kind"] == "human"


def test_posting_again_does_not_join_again(general, ada):
    post(ada)
    post(ada, body="And one more thing.")
    assert kinds().count("join") == 3


def test_a_person_posts_in_a_room_of_any_project(ada):
    far = SessionFactory(
        workspace=WorkspaceFactory(project=ProjectFactory(slug="far"), slug="main"), name="zed"
    )
    services.room_create(far, slug="far-room")
    sent = services.person_message_send(ada.session, "far-room", body="Hello from the admin.")
    assert sent.message.room.slug == "far-room"


def test_a_body_refused_for_itself_joins_nobody(general, ada):
    with pytest.raises(ValidationFailed):
        post(ada, body="   ")
    with pytest.raises(BodyTooLarge):
        post(ada, body="x" * 16385)
    assert kinds() == ["join", "join"]


def test_a_locked_room_and_a_mute_refuse_a_person_as_they_refuse_agents(general, ada, alice):
    post(ada)
    member = member_get_for_operator(general, "ada")
    services.member_mute(member, actor="admin:ops", reason="calm down")
    with pytest.raises(MemberMuted):
        post(ada, body="still here")
    services.member_unmute(member, actor="admin:ops")
    services.room_lock(general, actor="admin:ops", reason="release freeze")
    with pytest.raises(RoomLocked):
        post(ada, body="still here")
    assert Message.objects.filter(author__handle="ada").count() == 1


def test_a_form_sent_twice_with_one_key_stores_one_message(general, ada):
    first = post(ada, idempotency_key="admin-form-1")
    again = post(ada, idempotency_key="admin-form-1")
    assert again.replayed is True
    assert again.message.pk == first.message.pk
    assert Message.objects.filter(author__handle="ada").count() == 1


def test_require_read_holds_a_person_to_the_events_their_page_showed(general, ada, alice):
    post(ada)
    shown = general.events.order_by("-seq").first().seq
    send(alice, body="Wait, I moved parser.py yesterday.")
    with pytest.raises(UnreadMessages):
        post(ada, body="Settled, then.", after_seq=shown, require_read=True)
    assert Message.objects.filter(author__handle="ada").count() == 1


def test_agents_mention_a_person_who_took_part(general, ada, alice):
    post(ada)
    response = send(alice, body="@ada can you approve the release?")
    assert [m["handle"] for m in response.json()["mentions"]] == ["ada"]
    assert MessageMention.objects.filter(name=ada.name).count() == 1


def test_a_revoked_optin_or_accept_all_turned_off_never_removes_a_person(ada):
    acme = ProjectFactory(slug="acme", accept_all_projects=True)
    owner = SessionFactory(workspace=WorkspaceFactory(project=acme, slug="main"), name="owner")
    services.room_create(owner, slug="acme-room")
    services.person_message_send(ada.session, "acme-room", body="hello")

    mailbox_services.project_update(acme, actor="admin:ops", accept_all_projects=False)

    assert Member.objects.get(room__slug="acme-room", name=ada.name).left_at is None


def test_a_person_reviews_once_per_form_and_joins_first(general, ada, alice):
    message = send(alice, body="Ready to ship v2.4?").json()["message"]

    services.person_review_add(
        ada.session, "general", message["id"], verdict="approve", idempotency_key="admin-r1"
    )
    room, replayed = services.person_review_add(
        ada.session, "general", message["id"], verdict="approve", idempotency_key="admin-r1"
    )

    assert kinds() == ["join", "join", "message", "join", "review"]
    assert replayed.seq == room.head_seq
    with pytest.raises(ReviewIdempotencyKeyReused) as refused:
        services.person_review_add(
            ada.session, "general", message["id"], verdict="comment", idempotency_key="admin-r1"
        )
    assert refused.value.details == {"seq": replayed.seq}
    read = client_for(alice).get("/api/v1/rooms/general/messages/?after_seq=3").json()
    review = read["events"][-1]
    assert (review["kind"], review["actor"]["kind"]) == ("review", "human")
    assert review["review"]["verdict"] == "approve"


def test_a_review_of_a_message_elsewhere_is_not_a_replay(general, ada, alice):
    first = send(alice, body="one").json()["message"]
    second = send(alice, body="two").json()["message"]
    services.person_review_add(ada.session, "general", first["id"], verdict="approve")
    services.person_review_add(ada.session, "general", second["id"], verdict="approve")
    assert kinds().count("review") == 2


def test_a_person_who_left_is_no_member_for_reviews_without_taking_part_again(general, ada):
    post(ada)
    services.room_leave(ada.session, "general")
    with pytest.raises(NotAMember):
        services.review_add(
            ada.session, "general", Message.objects.first().public_id, verdict="approve"
        )


def test_a_persons_name_keeps_its_kind_in_every_event(general, ada):
    post(ada)
    name = AgentName.objects.get(handle="ada")
    assert set(Event.objects.filter(actor=name).values_list("kind", flat=True)) == {
        "join",
        "message",
    }
    assert name.kind == "human"
