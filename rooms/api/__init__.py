"""The rooms' REST door: input serializers, views and URLs, on ``mailbox.api``'s base view."""
