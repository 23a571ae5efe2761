"""People in the conversation, in the admin (SPEC §5.1): the compose box and review
buttons of a room's transcript, the inbox, a thread with its reply form, the page
where a person chooses their handle, and the small answer a page's refresh asks.

Everything here translates: forms into calls of the services REST and MCP run
(``rooms.services.person_message_send`` and ``person_review_add``,
``mailbox.services.note_leave`` and ``notes_claim``), and their refusals into
form errors in the API's words. A person acts through their session
(``mailbox.services.people``), found in one query; the admin site puts their
unread count on every page (``plumb_site.admin``).

Who takes part: an active staff user with ``mailbox.take_part`` (superusers,
and the ``moderators`` and ``participants`` groups). Their handle is claimed on
first use (the inbox, a post, a review): their username lower-cased when it is
a handle nobody has, else the handle page asks for one.

Opening a page is reading it: a thread's GET delivers its notes to the person,
the inbox's marks their mentions shown, a transcript's moves their read
position. Those pages refuse HEAD (405), as the API does (SPEC §2), and other
methods than GET and POST. Every form carries an idempotency key drawn when
it is drawn, so a form sent twice posts, reviews or answers once.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.text import Truncator
from django.views.decorators.http import require_GET, require_http_methods

from common import limits
from common.admin.actions import admin_actor
from common.errors import PlumbError, ValidationFailed
from common.transcripts import PAGE_SIZE, Page, parse_after_seq
from mailbox import selectors as mailbox_selectors
from mailbox import services as mailbox_services
from mailbox import transcripts as mailbox_transcripts
from mailbox.errors import ConversationNotFound, NotAParticipant
from mailbox.models import AuthorKind, Session
from rooms import services
from rooms.errors import NotAMember
from rooms.models import Event, Room
from rooms.selectors import people as people_selectors

TAKE_PART = "mailbox.take_part"
# Threads and mentions the inbox lists.
INBOX_LISTED = 50
# Seconds between two looks of a page's refresh (static/plumb/live.js).
REFRESH_SECONDS = 5


def may_take_part(user: AbstractBaseUser) -> bool:
    return bool(user.is_active and user.is_staff and user.has_perm(TAKE_PART))


def person_session(request: HttpRequest) -> Session | None:
    """The session the admin acts through for this user; None before they have a handle."""
    if not hasattr(request, "_plumb_person_session"):
        request._plumb_person_session = mailbox_selectors.person_session_for_user(request.user.pk)
    return request._plumb_person_session


def person_session_or_claim(request: HttpRequest) -> Session | None:
    """The user's session, their handle claimed first when their username makes one;
    None when they must choose a handle (the handle page)."""
    session = person_session(request)
    if session is not None:
        return session
    handle = mailbox_services.check_person_handle(request.user)
    if handle is None:
        return None
    try:
        mailbox_services.person_claim(request.user, handle=handle, actor=admin_actor(request))
    except PlumbError:
        return None  # taken in between: they choose another
    del request._plumb_person_session
    return person_session(request)


def _display_name(request: HttpRequest) -> str:
    return request.user.get_full_name()[: limits.DISPLAY_NAME_MAX]


def _new_key() -> str:
    """A form's idempotency key: drawn with the form, sent back with it."""
    return f"admin-{secrets.token_urlsafe(18)}"


def _handle_url(next_url: str) -> str:
    return f"{reverse('admin:people_handle')}?{urlencode({'next': next_url})}"


def _safe_next(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def add_service_error(form: forms.Form, error: PlumbError, *, field: str | None = None) -> None:
    """A service's refusal as form errors, in the API's words: each field's problems
    under that field, anything else above the form (or under ``field``)."""
    if isinstance(error, ValidationFailed) and error.details:
        for name, problems in error.details.items():
            target = name if name in form.fields else None
            for problem in problems if isinstance(problems, list) else [problems]:
                form.add_error(target, problem if target else f"{name}: {problem}")
        return
    if field is None and "body" in error.details and "body" in form.fields:
        field = "body"
    form.add_error(field, f"{error.message} ({error.code})")


class _KeyedForm(forms.Form):
    idempotency_key = forms.CharField(
        widget=forms.HiddenInput, max_length=limits.IDEMPOTENCY_KEY_MAX
    )


def _body_field(rows: int, label: str) -> forms.CharField:
    # Not required and not stripped: the service says what an empty or
    # over-long body is, in the API's words.
    return forms.CharField(
        label=label, required=False, strip=False, widget=forms.Textarea(attrs={"rows": rows})
    )


def _lf(text: str) -> str:
    # Browsers send a textarea's line breaks as CRLF; agents write LF.
    return text.replace("\r\n", "\n")


class ComposeForm(_KeyedForm):
    body = _body_field(4, "Message (markdown)")
    require_read = forms.BooleanField(
        label="Only if nothing new arrived since this page was loaded",
        required=False,
        help_text="require_read: refused, and nothing posted, if a message or review "
        "from someone else came after the last event shown here.",
    )
    reply_to = forms.CharField(widget=forms.HiddenInput, required=False, max_length=64)
    after_seq = forms.IntegerField(widget=forms.HiddenInput, min_value=0)

    def clean_body(self) -> str:
        return _lf(self.cleaned_data["body"])


class ReviewForm(_KeyedForm):
    message_id = forms.CharField(widget=forms.HiddenInput, max_length=64)
    verdict = forms.ChoiceField(choices=Event.Verdict.choices)
    body = _body_field(2, "Comment (optional)")

    def clean_body(self) -> str:
        return _lf(self.cleaned_data["body"])


class ReplyForm(_KeyedForm):
    body = _body_field(4, "Your answer (markdown)")

    def __init__(self, *args: Any, others: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if len(others) > 1:
            # With one other participant the service finds the recipient itself.
            self.fields["to"] = forms.ChoiceField(
                label="To", choices=[(handle, f"@{handle}") for handle in others]
            )

    def clean_body(self) -> str:
        return _lf(self.cleaned_data["body"])


class HandleForm(forms.Form):
    handle = forms.CharField(
        label="Your handle",
        max_length=limits.NAME_MAX,
        help_text=f"{limits.HANDLE_MESSAGE} Agents write to you and mention you by it; "
        "it is yours for good, and no agent can take it.",
    )


# --- the room transcript: the compose box and review buttons --------------------------------


@dataclass
class RoomTalk:
    """A person's part of a room's transcript page: the compose box, the review
    buttons, and the read position that follows what the page shows."""

    request: HttpRequest
    room: Room
    transcript_url: str
    compose: ComposeForm | None = None
    _key_spent: bool = False

    @property
    def session(self) -> Session | None:
        return person_session(self.request)

    def post(self) -> HttpResponse | None:
        """Run the form posted; a redirect when it went through, None when the
        page is to be shown again with the form's errors."""
        session = person_session_or_claim(self.request)
        if session is None:
            return HttpResponseRedirect(_handle_url(self.transcript_url))
        if self.request.POST.get("talk") == "review":
            return self._review(session)
        return self._send(session)

    def _send(self, session: Session) -> HttpResponse | None:
        form = ComposeForm(self.request.POST)
        self.compose = form
        if not form.is_valid():
            return None
        data = form.cleaned_data
        try:
            sent = services.person_message_send(
                session,
                self.room.slug,
                body=data["body"],
                display_name=_display_name(self.request),
                reply_to=data["reply_to"] or None,
                idempotency_key=data["idempotency_key"],
                after_seq=data["after_seq"],
                require_read=data["require_read"],
            )
        except PlumbError as error:
            # This form's key posted another message already (a form sent again
            # after an edit): the form shown next gets a fresh one.
            self._key_spent = error.code == "idempotency_key_reused"
            add_service_error(form, _worded(error))
            return None
        return HttpResponseRedirect(self._at(sent.message.seq))

    def _review(self, session: Session) -> HttpResponse:
        form = ReviewForm(self.request.POST)
        back = self.request.get_full_path()
        if not form.is_valid():
            messages.error(self.request, "That review was not understood; try again.")
            return HttpResponseRedirect(back)
        data = form.cleaned_data
        try:
            _, event = services.person_review_add(
                session,
                self.room.slug,
                data["message_id"],
                verdict=data["verdict"],
                body=data["body"] or None,
                display_name=_display_name(self.request),
                idempotency_key=data["idempotency_key"],
            )
        except PlumbError as error:
            messages.error(self.request, f"Review refused: {error.message} ({error.code})")
            return HttpResponseRedirect(back)
        return HttpResponseRedirect(self._at(event.seq))

    def _at(self, seq: int) -> str:
        # A page that ends well after the event, so what follows shows below it.
        return f"{self.transcript_url}?after_seq={max(seq - PAGE_SIZE // 2, 0)}#seq-{seq}"

    def read(self, page: Page) -> None:
        """Opening the page reads it: the person's read position (if a member) moves
        up to its last event, so agents' read receipts say so."""
        session = self.session
        if session is None or page.last_seq is None or self.request.method != "GET":
            return
        with contextlib.suppress(NotAMember):
            services.read_position_set(session, self.room.slug, seq=page.last_seq)

    def context(self, page: Page) -> dict[str, Any]:
        session = self.session
        handle = (
            session.name.handle
            if session is not None
            else mailbox_services.check_person_handle(self.request.user)
        )
        form = self.compose or ComposeForm(initial={"idempotency_key": _new_key()})
        key = form["idempotency_key"].value()
        if form.is_bound and self._key_spent:
            key = _new_key()
        # A message's "Reply" link (?reply_to=msg_...) fills the box's reply_to.
        reply_to = form["reply_to"].value() if form.is_bound else self.request.GET.get("reply_to")
        reply_seq = next(
            (e.seq for e in page.entries if reply_to and e.public_id == reply_to), None
        )
        return {
            "talk": {
                "handle": handle,
                "handle_url": _handle_url(self.transcript_url),
                "form": form,
                "key": key,
                # The events shown are what the person has seen: the send's
                # reference point, also when the form is shown again.
                "after_seq": page.last_seq if page.last_seq is not None else page.after_seq,
                "reply_to": reply_to or "",
                "reply_seq": reply_seq,
                "review_key": _new_key(),
                "verdicts": Event.Verdict.choices,
                "pulse": f"{reverse('admin:people_pulse')}?{urlencode({'room': self.room.pk})}",
                "state": str(self.room.head_seq),
                "refresh": REFRESH_SECONDS,
            }
        }


def _worded(error: PlumbError) -> PlumbError:
    """The API's refusal, with what a person at this page should do about it."""
    if error.code == "unread_messages":
        count = error.details.get("unseen_count", 0)
        error.message = (
            f"{count} new message{'s' if count != 1 else ''} or review{'s' if count != 1 else ''} "
            "arrived after the last event this page showed. They are shown now: read them, "
            "then send again."
        )
    elif error.code == "idempotency_key_reused":
        error.message = (
            "This form was sent already, with another text; nothing more was posted. "
            "Send the form below, which is new, to post this text."
        )
    return error


def room_talk(request: HttpRequest, room: Room, transcript_url: str) -> RoomTalk | None:
    """The person's part of the transcript page; None for a user who may not take part."""
    if not may_take_part(request.user):
        return None
    return RoomTalk(request=request, room=room, transcript_url=transcript_url)


# --- the site's pages: inbox, thread, handle, pulse -------------------------------------------


def _person_or_redirect(request: HttpRequest) -> Session | HttpResponse:
    if not may_take_part(request.user):
        raise PermissionDenied
    session = person_session_or_claim(request)
    if session is None:
        return HttpResponseRedirect(_handle_url(request.get_full_path()))
    return session


@require_GET
def inbox_view(request: HttpRequest, *, site: admin.AdminSite) -> HttpResponse:
    """The person's threads (newest activity first) and mentions; opening it shows
    them their mentions, which then stop counting as unread."""
    session = _person_or_redirect(request)
    if isinstance(session, HttpResponse):
        return session
    person = session.name.person
    try:
        threads, has_more = mailbox_selectors.conversation_list_for_session(
            session, after_id=request.GET.get("after") or None, limit=INBOX_LISTED
        )
    except ConversationNotFound:
        raise Http404("No such page of threads.") from None
    page_ids = [thread.pk for thread in threads]
    waiting = mailbox_selectors.notes_waiting_by_conversation(session.name_id, page_ids)
    last_notes = mailbox_selectors.notes_last_by_conversation(page_ids)
    mentions = people_selectors.person_mentions(session.name_id, limit=INBOX_LISTED)
    seen_before = person.mentions_seen
    if mentions:
        mailbox_services.person_mentions_seen(person, upto=mentions[0].pk)
    handle = session.name.handle
    context = {
        **site.each_context(request),
        "title": "Inbox",
        "subtitle": None,
        "handle": handle,
        "threads": [
            {
                "id": thread.public_id,
                "url": reverse("admin:people_thread", args=[thread.public_id]),
                "with": [p.name for p in thread.participants.all() if p.name_id != session.name_id],
                "waiting": waiting.get(thread.pk, 0),
                "awaits_you": handle in thread.awaiting_reply_from,
                "last_note_at": thread.last_note_at,
                "notes_count": thread.notes_count,
                "exchanges_left": thread.exchanges_left,
                "locked": thread.locked_at is not None,
                "last": _last_note_line(last_notes.get(thread.pk)),
            }
            for thread in threads
        ],
        "more_url": (
            f"?{urlencode({'after': threads[-1].public_id})}" if has_more and threads else None
        ),
        "mentions": [_mention_row(mention, seen_before) for mention in mentions],
        "live": {
            "pulse": f"{reverse('admin:people_pulse')}?inbox=1",
            "state": people_selectors.person_inbox_state(person),
            "refresh": REFRESH_SECONDS,
        },
    }
    return TemplateResponse(request, "plumb/people_inbox.html", context)


def _last_note_line(note: Any) -> str:
    """``alice: the first words...`` of a thread's last note, as plain text."""
    if note is None:
        return ""
    sender = note.sender_name.handle if note.sender_name_id else limits.SYSTEM_NAME
    return f"{sender}: {Truncator(' '.join(note.body.split())).chars(140)}"


def _mention_row(mention: Any, seen_before: int) -> dict[str, Any]:
    message = mention.message
    room = message.room
    transcript = reverse("admin:rooms_room_transcript", args=[room.pk])
    return {
        "new": mention.pk > seen_before,
        "room": room.slug,
        "seq": message.seq,
        "author": message.author.handle,
        "author_is_human": message.author.kind == AuthorKind.HUMAN,
        "excerpt": Truncator(message.body).chars(180),
        "hidden": message.hidden,
        "created_at": message.created_at,
        "url": f"{transcript}?after_seq={max(message.seq - 1, 0)}#seq-{message.seq}",
    }


@require_http_methods(["GET", "POST"])
def thread_view(
    request: HttpRequest, conversation_id: str, *, site: admin.AdminSite
) -> HttpResponse:
    """One thread of the person's: opening it (GET) delivers its notes to them, exactly
    once; the reply form answers in it."""
    session = _person_or_redirect(request)
    if isinstance(session, HttpResponse):
        return session
    try:
        conversation = mailbox_selectors.conversation_get_for_session(session, conversation_id)
    except (ConversationNotFound, NotAParticipant):
        raise Http404("No such thread of yours.") from None
    participants = list(conversation.participants.all())
    others = [p.name.handle for p in participants if p.name_id != session.name_id]
    url = reverse("admin:people_thread", args=[conversation.public_id])
    if request.method == "POST":
        form = ReplyForm(request.POST, others=others)
        if form.is_valid():
            data = form.cleaned_data
            try:
                left = mailbox_services.note_leave(
                    session,
                    body=data["body"],
                    to=data.get("to") or None,
                    conversation_id=conversation.public_id,
                    idempotency_key=data["idempotency_key"],
                )
            except PlumbError as error:
                add_service_error(form, error)
            else:
                return HttpResponseRedirect(f"{url}#seq-{left.note.position}")
        delivered = []
    else:
        form = ReplyForm(initial={"idempotency_key": _new_key()}, others=others)
        delivered = mailbox_services.notes_claim(session, conversation=conversation)
    page = mailbox_transcripts.conversation_transcript(
        conversation, after_seq=parse_after_seq(request.GET.get("after_seq"))
    )
    context = {
        **site.each_context(request),
        "title": f"Thread {conversation.public_id}",
        "subtitle": None,
        "original": conversation,
        "handle": session.name.handle,
        "participants": participants,
        "page": page,
        "just_delivered": {note.public_id for note in delivered},
        "form": form,
        "inbox_url": reverse("admin:people_inbox"),
        "live": {
            "pulse": f"{reverse('admin:people_pulse')}?"
            f"{urlencode({'thread': conversation.public_id})}",
            "state": str(conversation.last_position),
            "refresh": REFRESH_SECONDS,
        },
    }
    return TemplateResponse(request, "plumb/people_thread.html", context)


@require_http_methods(["GET", "POST"])
def handle_view(request: HttpRequest, *, site: admin.AdminSite) -> HttpResponse:
    """Choose one's handle, once: asked of people whose username makes none."""
    if not may_take_part(request.user):
        raise PermissionDenied
    next_url = _safe_next(request, reverse("admin:people_inbox"))
    session = person_session(request)
    form = None
    if session is None:
        suggestion = mailbox_services.check_person_handle(request.user) or ""
        form = HandleForm(request.POST or None, initial={"handle": suggestion})
        if request.method == "POST" and form.is_valid():
            try:
                mailbox_services.person_claim(
                    request.user, handle=form.cleaned_data["handle"], actor=admin_actor(request)
                )
            except PlumbError as error:
                add_service_error(form, error, field="handle")
            else:
                return HttpResponseRedirect(next_url)
    elif request.method == "POST":
        return HttpResponseRedirect(next_url)
    context = {
        **site.each_context(request),
        "title": "Your handle",
        "subtitle": None,
        "form": form,
        "handle": session.name.handle if session is not None else None,
        "next_url": next_url,
    }
    return TemplateResponse(request, "plumb/people_handle.html", context)


@require_GET
def pulse_view(request: HttpRequest, *, site: admin.AdminSite) -> JsonResponse:
    """What a page's refresh asks every few seconds: the unread count, and a state
    that changes when the page would (a room's head, a thread's last note, the
    inbox). Reads only; a few queries."""
    if not may_take_part(request.user):
        raise PermissionDenied
    unread = people_selectors.person_unread(request.user.pk)
    state = ""
    session = person_session(request)
    if request.GET.get("room", "").isdigit():
        room = Room.objects.filter(pk=int(request.GET["room"])).values_list("head_seq", flat=True)
        state = str(room.first())
    elif request.GET.get("thread") and session is not None:
        try:
            conversation = mailbox_selectors.conversation_get_for_session(
                session, request.GET["thread"]
            )
        except (ConversationNotFound, NotAParticipant):
            raise Http404("No such thread of yours.") from None
        state = str(conversation.last_position)
    elif request.GET.get("inbox") and session is not None:
        state = people_selectors.person_inbox_state(session.name.person)
    return JsonResponse({"unread": unread.total if unread else 0, "state": state})


def header(request: HttpRequest) -> dict[str, Any] | None:
    """The inbox link and unread count every admin page shows a person (one query)."""
    user = getattr(request, "user", None)
    if user is None or not may_take_part(user):
        return None
    unread = people_selectors.person_unread(user.pk)
    return {
        "url": reverse("admin:people_inbox"),
        "unread": unread.total if unread else 0,
        "handle": unread.handle if unread else None,
        "pulse": reverse("admin:people_pulse"),
        "refresh": REFRESH_SECONDS,
    }
