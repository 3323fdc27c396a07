"""The dashboard's access rules and CSRF tokens as pure values (recruiter.web.security)."""

from __future__ import annotations

import pytest

from recruiter.web import Access, Csrf, Hosts, check_binding, is_loopback
from recruiter.web.security import parse_authority


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


@pytest.mark.parametrize(("value", "parsed"), [
    ("127.0.0.1", ("127.0.0.1", None)), ("127.0.0.1:8080", ("127.0.0.1", 8080)), ("LocalHost:80", ("localhost", 80)),
    ("[::1]", ("[::1]", None)), ("[::1]:8080", ("[::1]", 8080)), ("dash.example.com", ("dash.example.com", None)),
    ("::1", None), ("[::1]x", None), ("[nope]:80", None), ("a:b", None), ("x:0", None), ("x:65536", None),
    ("x:", None), ("", None), ("a b", None), ("evil.example:8080@127.0.0.1", None), ("-x", None), ("x.", None),
    ("ex\u202eample", None)])
def test_host_headers_are_parsed_strictly(value: str, parsed: tuple[str, int | None] | None) -> None:
    assert parse_authority(value) == parsed


def test_the_names_a_dashboard_serves() -> None:
    hosts = Hosts.of(8080, ["dash.example.com", "ops.example.com:8443"])
    served = ["127.0.0.1:8080", "127.0.0.1", "localhost:8080", "[::1]:8080", "dash.example.com",
              "dash.example.com:443", "ops.example.com:8443"]
    refused = ["127.0.0.1:9090", "evil.example:8080", "ops.example.com", "ops.example.com:443", "127.0.0.2:8080",
               "10.0.0.5:8080", "", None, "x" * 400]
    assert [h for h in served if not hosts.serves(h)] == []
    assert [h for h in refused if hosts.serves(h)] == []
    assert Hosts().serves("localhost:1234")  # no port known (--port 0): any port of a loopback name
    assert Hosts.of(8080, listen="192.168.1.20").serves("192.168.1.20:8080")
    assert not Hosts.of(8080, listen="192.168.1.20").serves("192.168.1.20:9090")
    assert Hosts.of(8080, listen="2001:db8::5").serves("[2001:db8::5]:8080")
    assert Hosts.of(8080, listen="0.0.0.0").allowed == ()


def test_an_origin_is_judged_by_the_names_served() -> None:
    hosts = Hosts.of(8080, ["dash.example.com"])
    assert hosts.same_origin("http://127.0.0.1:8080", None)
    assert hosts.same_origin("https://dash.example.com", "cross-site")  # the Origin decides when there is one
    for origin in ("null", "http://evil.example:8080", "http://127.0.0.1:9090", "file://", "ftp://127.0.0.1:8080",
                   "http://127.0.0.1:8080/path", "http://[::1"):
        assert not hosts.same_origin(origin, None), origin
    assert hosts.same_origin(None, None)
    assert hosts.same_origin(None, "same-origin")
    assert hosts.same_origin(None, "none")
    assert not hosts.same_origin(None, "same-site")
    assert not hosts.same_origin(None, "cross-site")


@pytest.mark.parametrize(("value", "says"), [
    ("https://dash.example.com", "not a URL"), ("*", "not a URL nor a pattern"), ("*.example.com", "pattern"),
    ("::1", "in brackets"), ("a b", "is not a host name"), ("x:99999", "is not a host name"),
    ("user@host", "not a URL")])
def test_a_bad_allowed_host_is_one_line(value: str, says: str) -> None:
    with pytest.raises(ValueError, match="--allowed-host") as refused:
        Hosts.of(8080, [value])
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)
