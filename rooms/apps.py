from django.apps import AppConfig


class RoomsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "rooms"
    verbose_name = "Rooms"

    def ready(self) -> None:
        # Imported here: models and services need the app registry ready.
        from mailbox.signals import optin_revoked
        from rooms.receivers import on_optin_revoked

        # A revoked opt-in takes the other project's members out of this
        # project's rooms, in the revocation's transaction (mailbox/signals.py).
        optin_revoked.connect(on_optin_revoked, dispatch_uid="rooms.on_optin_revoked")
