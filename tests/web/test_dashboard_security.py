"""The dashboard's access rules and CSRF tokens as pure values (recruiter.web.security)."""

from __future__ import annotations

import pytest

from recruiter.web import Access, Csrf, check_binding, is_loopback


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("LOCALHOST", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("example.com", False),
    ("", False)])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_beyond_localhost_needs_a_token_or_a_password() -> None:
    check_binding("127.0.0.1", Access())
    check_binding("0.0.0.0", Access(token="t"))
    check_binding("0.0.0.0", Access(user="ops", password="p"))
    with pytest.raises(ValueError, match="serves beyond this machine"):
        check_binding("0.0.0.0", Access())


@pytest.mark.parametrize("kwargs", [{"token": ""}, {"user": "ops"}, {"password": "p"},
                                    {"user": "a:b", "password": "p"}, {"user": "ops", "password": ""}])
def test_an_incomplete_access_is_refused(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="--"):
        Access(**kwargs)


def test_no_secret_in_the_repr() -> None:
    text = repr(Access(token="tok-123", user="ops", password="pw-456"))
    assert "tok-123" not in text
    assert "pw-456" not in text


def test_csrf_tokens_are_bound_to_their_session_and_their_process() -> None:
    mine, other = Csrf(), Csrf()
    session, another = Csrf.new_session(), Csrf.new_session()
    token = mine.token(session)
    assert mine.accepts(session, token)
    assert not mine.accepts(another, token)  # a token from another session
    assert not other.accepts(session, token)  # from another process (or before a restart)
    assert not mine.accepts(session, None)
    assert not mine.accepts(None, token)
    assert not mine.accepts(session, session)
    assert not mine.accepts("short", mine.token("short"))  # not a session this process hands out
    assert not mine.accepts(session, token + "x")
