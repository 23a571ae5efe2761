"""Content negotiation that always answers with the view's first renderer.

The API has one representation, JSON; a client that sends ``Accept:
text/html`` still gets JSON rather than a 406 (which would itself need a
representation). Kept apart from ``api.py`` because DRF imports it while
``rest_framework.views`` is still loading.
"""

from rest_framework.negotiation import DefaultContentNegotiation


class JSONOnlyNegotiation(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
