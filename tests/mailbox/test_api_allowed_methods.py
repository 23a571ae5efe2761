"""The methods a view answers, remembered per kind of view, are those Django works out each time.

``PlumbApiView.allowed_methods`` is asked twice a call (to refuse another
method before any credential is read, and for the ``Allow`` header); its
answer is kept per view class, method names, methods bound to the instance
and whether the view authenticates.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from mailbox.api.base import PlumbApiView

factory = APIRequestFactory()


class _Reads(PlumbApiView):
    def get(self, request):
        raise AssertionError("not called")

    def post(self, request):
        raise AssertionError("not called")


class _Open(_Reads):
    authentication_classes = ()
    permission_classes = ()


def _made(view_class, **bound):
    view = view_class()
    for name, handler in bound.items():
        setattr(view, name, handler)
    view.setup(factory.get("/"))
    return view


def _djangos(view):
    """Django's own answer, without HEAD for a view that authenticates."""
    methods = APIView.allowed_methods.fget(view)
    return [m for m in methods if m != "HEAD"] if view.authentication_classes else methods


@pytest.mark.parametrize(
    ("view_class", "bound", "expected"),
    [
        (_Reads, {}, ["GET", "POST", "OPTIONS"]),
        (_Open, {}, ["GET", "POST", "HEAD", "OPTIONS"]),
        # Bound to one instance, as a viewset binds its actions: that instance's own.
        (_Reads, {"delete": lambda request: None}, ["GET", "POST", "DELETE", "OPTIONS"]),
        (_Open, {"put": lambda request: None}, ["GET", "POST", "PUT", "HEAD", "OPTIONS"]),
    ],
)
def test_the_methods_are_djangos_however_often_asked(view_class, bound, expected):
    for _ in range(3):  # the first asks Django, the others what was kept
        view = _made(view_class, **bound)
        assert view.allowed_methods == _djangos(view) == expected


def test_instances_of_one_class_keep_their_own_answers_apart():
    plain = _made(_Reads)
    bound = _made(_Reads, delete=lambda request: None)
    narrower = _made(_Reads)
    narrower.http_method_names = ["get", "options"]

    assert plain.allowed_methods == ["GET", "POST", "OPTIONS"]
    assert bound.allowed_methods == ["GET", "POST", "DELETE", "OPTIONS"]
    assert narrower.allowed_methods == ["GET", "OPTIONS"]


def test_an_answer_changed_by_its_caller_is_not_the_next_callers():
    _made(_Reads).allowed_methods.append("PATCH")

    assert _made(_Reads).allowed_methods == ["GET", "POST", "OPTIONS"]


def test_the_allow_header_and_the_refusal_use_it(client, db):
    response = client.generic("PATCH", "/api/v1/sessions/current/")

    assert response.status_code == 405
    assert response["Allow"] == "GET, DELETE, OPTIONS"  # the session ends with DELETE
