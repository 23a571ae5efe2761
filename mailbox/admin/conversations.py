"""Conversations and their notes, for operators and moderators.

Notes are read-only: they are the agents' words, delivered exactly once, and
the admin changes none of them. A conversation can be locked (and unlocked)
with a reason, through the same service the audit trail is written by; its
transcript renders the notes as sanitised markdown.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from common.admin.actions import ActionsNeedChangeMixin, reason_action
from common.admin.pages import (
    ListTitleMixin,
    ObjectToolsMixin,
    ToolButton,
    badge,
    slug_filter,
    utc_column,
    utc_time,
)
from common.admin.paging import LargeTableAdminMixin
from common.admin.search import FullTextSearchMixin
from common.limits import SYSTEM_NAME
from common.markdown import render_markdown
from common.transcripts import parse_after_seq
from mailbox import selectors, services, transcripts
from mailbox.models import Conversation, Note, Participant
from mailbox.selectors import notes_matching


class LockedFilter(admin.SimpleListFilter):
    title = "locked"
    parameter_name = "locked"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("yes", "Locked"), ("no", "Open")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.filter(locked_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(locked_at__isnull=True)
        return queryset


class NoteStateFilter(admin.SimpleListFilter):
    """Waiting, delivered or bounced; waiting notes are listed longest-waiting first."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [
            (Note.State.WAITING, "Waiting (longest first)"),
            (Note.State.DELIVERED, "Delivered"),
            (Note.State.BOUNCED, "Bounced"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in Note.State.values:
            return queryset.filter(selectors.note_state_condition(self.value()))
        return queryset


# The project whose note_ttl applies: the sender's.
SenderProjectFilter = slug_filter(
    "sender's project", "project", "sender_name__workspace__project__slug"
)


def _addressee(note: Note) -> str:
    return f"next in {note.next_workspace}" if note.next_workspace_id else note.recipient.handle


_STATE_BADGES = {"waiting": "warn", "delivered": "ok", "bounced": "danger"}


def _sender(note: Note) -> str:
    # plumb's own notes (bounce notices) have no sender name.
    return note.sender_name.handle if note.sender_name_id else f"{SYSTEM_NAME} (system)"


class NoteInline(admin.TabularInline):
    model = Note
    fields = ("note_link", "sender", "to", "created", "delivered", "excerpt")
    readonly_fields = fields
    created = utc_column("created_at", "sent")
    delivered = utc_column("delivered_at", "delivered")
    extra = 0
    can_delete = False
    verbose_name_plural = "Notes (the transcript shows them in full)"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Note]:
        return (
            super()
            .get_queryset(request)
            .select_related("sender_name", "recipient", "next_workspace__project")
        )

    @admin.display(description="#")
    def note_link(self, note: Note) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:mailbox_note_change", args=[note.pk]),
            note.position,
        )

    @admin.display(description="from")
    def sender(self, note: Note) -> str:
        return _sender(note)

    @admin.display(description="to")
    def to(self, note: Note) -> str:
        return _addressee(note)

    @admin.display(description="body")
    def excerpt(self, note: Note) -> str:
        return Truncator(note.body).chars(80)

    def has_add_permission(self, request: HttpRequest, obj: Conversation | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Conversation | None = None) -> bool:
        return False


@admin.register(Conversation)
class ConversationAdmin(
    ActionsNeedChangeMixin, ListTitleMixin, ObjectToolsMixin, LargeTableAdminMixin, admin.ModelAdmin
):
    list_display = (
        "public_id",
        "participant_handles",
        "notes_count",
        "cap",
        "last_note",
        "state",
    )
    list_filter = (LockedFilter,)
    search_fields = ("=public_id", "participants__name__handle")
    search_help_text = "Conversation id (exact) or a participant's name."
    ordering = ("-last_note_at", "-id")
    fields = (
        "public_id",
        "participant_list",
        "cap",
        "notes_count",
        "exchanges_left",
        "created",
        "last_note",
        "state",
    )
    readonly_fields = fields
    created = utc_column("created_at", "started")
    last_note = utc_column("last_note_at", "last note")
    inlines = (NoteInline,)
    actions = ("lock_conversations", "unlock_conversations")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        # One query for the participants of the whole page, not one per row.
        participants = Participant.objects.select_related("name__workspace__project").order_by(
            "joined_at", "id"
        )
        return (
            super()
            .get_queryset(request)
            .prefetch_related(Prefetch("participants", queryset=participants))
        )

    @admin.display(description="participants")
    def participant_handles(self, conversation: Conversation) -> str:
        return ", ".join(p.name.handle for p in conversation.participants.all())

    @admin.display(description="participants")
    def participant_list(self, conversation: Conversation) -> SafeString:
        return format_html_join(
            "",
            '<div><strong>{}</strong> <span class="plumb-muted">{}</span>{}</div>',
            (
                (
                    p.name.handle,
                    p.name.workspace,
                    mark_safe(' <span class="plumb-badge">has written</span>')
                    if p.has_written
                    else "",
                )
                for p in conversation.participants.all()
            ),
        )

    @admin.display(description="state", ordering="locked_at")
    def state(self, conversation: Conversation) -> SafeString:
        if conversation.locked_at is None:
            return badge("open", "ok")
        return format_html(
            '{} <span class="plumb-muted">since {}</span>',
            badge("locked", "danger"),
            utc_time(conversation.locked_at),
        )

    @admin.display(description="exchanges left")
    def exchanges_left(self, conversation: Conversation) -> int:
        return conversation.exchanges_left

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # threads start with a note, over the API

    def has_change_permission(self, request: HttpRequest, obj: Conversation | None = None) -> bool:
        # Change permission gates the lock actions; the object page is view-only.
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Conversation | None = None) -> bool:
        return False  # lock a thread instead; its history is the record

    lock_conversations = reason_action(
        description="Lock selected conversations…",
        title="Lock conversations",
        button="Lock",
        help_text="The participants' next note is refused with conversation_locked. "
        "The reason goes into the audit trail.",
        apply=lambda conversation, actor, reason: services.conversation_lock(
            conversation, actor=actor, reason=reason
        ),
        done="Locked {n} conversation(s).",
        unchanged="{n} conversation(s) were locked already and were left as they were.",
    )
    unlock_conversations = reason_action(
        description="Unlock selected conversations…",
        title="Unlock conversations",
        button="Unlock",
        required=False,
        help_text="Participants may write again, up to the thread's cap.",
        apply=lambda conversation, actor, reason: services.conversation_unlock(
            conversation, actor=actor, reason=reason
        ),
        done="Unlocked {n} conversation(s).",
        unchanged="{n} conversation(s) were not locked and were left as they were.",
    )

    def object_tools(self, request: HttpRequest, obj: Conversation) -> list[ToolButton]:
        tools = [
            ToolButton(
                label="Transcript",
                url=reverse(
                    "admin:mailbox_conversation_transcript",
                    args=[obj.pk],
                    current_app=self.admin_site.name,
                ),
            )
        ]
        if obj.locked_at is None:
            return tools + self.reason_tools(request, [("lock_conversations", "Lock…", True)])
        return tools + self.reason_tools(request, [("unlock_conversations", "Unlock…", False)])

    # --- transcript -------------------------------------------------------------------

    def get_urls(self) -> list:
        return [
            path(
                "<path:object_id>/transcript/",
                self.admin_site.admin_view(self.transcript_view),
                name="mailbox_conversation_transcript",
            ),
            *super().get_urls(),
        ]

    def transcript_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        conversation = self.get_object(request, unquote(object_id))
        if conversation is None:
            raise Http404("No such conversation.")
        if not self.has_view_permission(request, conversation):
            raise PermissionDenied
        page = transcripts.conversation_transcript(
            conversation, after_seq=parse_after_seq(request.GET.get("after_seq"))
        )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Conversation {conversation.public_id}",
            "subtitle": "Transcript",
            "opts": self.opts,
            "original": conversation,
            "page": page,
            "participants": conversation.participants.all(),
            "change_url": reverse(
                "admin:mailbox_conversation_change",
                args=[conversation.pk],
                current_app=self.admin_site.name,
            ),
        }
        return TemplateResponse(request, "plumb/conversation_transcript.html", context)


@admin.register(Note)
class NoteAdmin(ListTitleMixin, FullTextSearchMixin, LargeTableAdminMixin, admin.ModelAdmin):
    """Notes, read-only: the agents' words as stored (secret-scrubbed before storing).

    The list says who wrote to whom and when; a search by words adds the
    matched words of each note (FullTextSearchMixin).
    """

    list_display = (
        "public_id",
        "conversation",
        "position",
        "sender",
        "to",
        "created",
        "delivered",
        "state",
    )
    list_filter = (NoteStateFilter, SenderProjectFilter)
    list_select_related = ("conversation", "sender_name", "recipient", "next_workspace__project")
    search_fields = ("=public_id", "=conversation__public_id", "sender_name__handle")
    search_matching = notes_matching
    search_help_text = (
        "Note or conversation id (exact), the sender's name, or words of the body: "
        '"a phrase", -word to leave out, prefix*.'
    )
    ordering = ("-id",)
    fields = (
        "public_id",
        "conversation",
        "position",
        "sender",
        "to",
        "delivery",
        "created",
        "state",
        "delivered",
        "bounced",
        "rendered",
        "body",
    )
    readonly_fields = fields
    created = utc_column("created_at", "sent", seconds=True)
    bounced = utc_column("bounced_at", "bounced", seconds=True)

    @admin.display(description="delivered", ordering="delivered_at")
    def delivered(self, obj: Note) -> SafeString | str:
        # A bounce settles the note too (delivered_at); it was never delivered.
        return utc_time(obj.delivered_at if obj.bounced_at is None else None, seconds=True)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Note]:
        return super().get_queryset(request).select_related(*self.list_select_related)

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        # Waiting notes, longest waiting first: the ones about to bounce.
        if request.GET.get(NoteStateFilter.parameter_name) == Note.State.WAITING:
            return ("id",)
        return super().get_ordering(request)

    @admin.display(description="state")
    def state(self, note: Note) -> SafeString:
        return badge(note.state, _STATE_BADGES[note.state])

    @admin.display(description="from", ordering="sender_name__handle")
    def sender(self, note: Note) -> str:
        return _sender(note)

    @admin.display(description="to")
    def to(self, note: Note) -> str:
        return _addressee(note)

    @admin.display(description="as rendered")
    def rendered(self, note: Note) -> SafeString:
        return format_html('<div class="plumb-body">{}</div>', render_markdown(note.body))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Note | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Note | None = None) -> bool:
        return False
