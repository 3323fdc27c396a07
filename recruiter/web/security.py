"""Who may use the dashboard, and how each request is bounded before a page reads anything.

- **Access** (:class:`Access`): none (the default, on a loopback address only), a bearer
  token (``Authorization: Bearer T``, or basic auth with any user and the token as
  password, so a browser can ask for it), or a user and password (basic auth).
  :func:`check_binding` refuses to serve beyond localhost without one.
- **Names** (:class:`Hosts`): the dashboard answers only for the names it serves (its
  loopback names by default, ``--allowed-host`` for more), so a site whose name is made
  to resolve to 127.0.0.1 (DNS rebinding) gets 400; a POST whose ``Origin`` is not one of
  them (or, without ``Origin``, whose ``Sec-Fetch-Site`` is not ``same-origin``/``none``)
  is refused, 403.
- **CSRF** (:class:`Csrf`): a token bound to the session. Every page sets a session cookie
  (random, HttpOnly, SameSite=Strict) and every form carries the HMAC of that session under
  a secret made when the process starts. A POST is accepted only when its token is the one
  of its own session, so another site can neither read nor forge one, and a token taken
  from another session is refused.
- **Bounds** (:class:`Limits`): the query string, a form's body and the page size.

Invariant: pure (no I/O, no database); secrets are compared in constant time, and
no secret (token, password, CSRF key) is ever put in a page, a log line or an error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})
SERVED_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")  # the names a dashboard answers for without --allowed-host
SESSION_COOKIE = "recruiter_session"
WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})  # bind addresses that name no host
CSRF_FIELD = "csrf"
REALM = 'Basic realm="recruiter dashboard", charset="UTF-8"'


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """How requests authenticate: a token, a user and password, or nothing (localhost only)."""

    token: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.token is not None and not self.token:
            raise ValueError("--token is empty: give a token, or leave it out")
        if (self.user is None) != (self.password is None):
            raise ValueError("--user and --password go together")
        if self.password is not None and not self.password:
            raise ValueError("--password is empty")
        if self.user is not None and (not self.user or ":" in self.user):
            raise ValueError("--user must be a non-empty name without ':'")

    def __repr__(self) -> str:  # no secret in a log line or a traceback
        return f"Access(token={'set' if self.token else None}, user={self.user!r})"

    @property
    def required(self) -> bool:
        return self.token is not None or self.password is not None

    def identify(self, authorization: str | None) -> str | None:
        """Who the ``Authorization`` header proves the caller is (``anonymous`` when none is required), or None."""
        if not self.required:
            return "anonymous"
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return "token" if self.token is not None and _same(value.strip(), self.token) else None
        if scheme == "basic":
            return self._basic(value.strip())
        return None

    def _basic(self, value: str) -> str | None:
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if not sep:
            return None
        if self.password is not None and self.user is not None and _same(user, self.user) and _same(
                password, self.password):
            return self.user
        if self.token is not None and _same(password, self.token):
            return f"token ({user[:60]})" if user else "token"
        return None


def check_binding(host: str, access: Access) -> None:
    """ValueError (one line) when ``host`` is reachable from other machines and no access is required."""
    if not is_loopback(host) and not access.required:
        raise ValueError(f"--host {host} serves beyond this machine: give --token (or RECRUITER_DASHBOARD_TOKEN), "
                         "or --user and --password")


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


_SESSION = re.compile(r"[A-Za-z0-9_-]{32}")


class Csrf:
    """Tokens bound to a session, under a key made for this process (restarting invalidates old forms)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    @staticmethod
    def new_session() -> str:
        """A new session id: the value of the session cookie."""
        return secrets.token_urlsafe(24)

    @staticmethod
    def is_session(value: str | None) -> bool:
        """Whether ``value`` is shaped like a session id (any string is safe to pass)."""
        return value is not None and _SESSION.fullmatch(value) is not None

    def token(self, session: str) -> str:
        """The CSRF token of ``session``: what its forms carry."""
        digest = hmac.new(self._key, b"csrf\0" + session.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def accepts(self, session: str | None, submitted: str | None) -> bool:
        """A POST's check: a session, and the form's token is the one this process made for it."""
        if not self.is_session(session) or not submitted or len(submitted) > 200:
            return False
        assert session is not None  # is_session
        return hmac.compare_digest(submitted.encode(), self.token(session).encode())


_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?", re.ASCII)
_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)


def parse_authority(value: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a ``Host`` header or an ``--allowed-host``: ``name``, ``name:port``, ``[v6]:port``.

    The name is lowercased; an IPv6 address keeps its brackets. None when malformed.
    """
    value = value.strip().lower()
    if value.startswith("["):
        address, bracket, rest = value[1:].partition("]")
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return None
        name, port_text = f"[{address}]", rest
        if not bracket or (port_text and not port_text.startswith(":")):
            return None
        port_text = port_text[1:] if port_text else ""
        has_port = bool(rest)
    else:
        name, has_port, port_text = value.partition(":")[0], ":" in value, value.partition(":")[2]
        if _NAME.fullmatch(name) is None:
            return None
    if not has_port:
        return name, None
    if _PORT.fullmatch(port_text) is None or not 0 < int(port_text) < 65536:
        return None
    return name, int(port_text)


def allowed_host(value: str) -> tuple[str, int | None]:
    """One ``--allowed-host`` value as ``(name, port)``; ValueError (one line) when it is not a host name."""
    if "/" in value or "*" in value or "@" in value:
        raise ValueError(f"--allowed-host {value!r}: give a host name as the browser sends it (dashboard.example.com, "
                         "or dashboard.example.com:8443), not a URL nor a pattern")
    parsed = parse_authority(value)
    if parsed is None:
        hint = " (write an IPv6 address in brackets: [::1])" if value.count(":") > 1 and "[" not in value else ""
        raise ValueError(f"--allowed-host {value!r} is not a host name, an IPv4 address or an [IPv6] address, "
                         f"with an optional :port{hint}")
    return parsed


@dataclass(frozen=True)
class Hosts:
    """The names the dashboard answers for: its loopback names on its port, and each ``--allowed-host``.

    A loopback name (127.0.0.1, localhost, [::1]) is served with the port the dashboard
    listens on (``port``; None: any) or without one; an allowed host without a port is
    served on any port (behind a proxy), with a port on that one only.

    Not Starlette's ``TrustedHostMiddleware``: it compares names only (never the port)
    and has no way to judge a POST's ``Origin`` by the same list; one rule here does both.
    """

    port: int | None = None
    allowed: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def of(cls, port: int | None, allowed: Iterable[str] = (), listen: str | None = None) -> Hosts:
        """The names served on ``port`` (0 or None: any); ValueError (one line) on a value that is not a host name.

        ``listen``, the address the dashboard binds, is served too (on its port) unless it
        is a wildcard (``0.0.0.0``, ``::``): a dashboard bound to ``192.168.1.20`` answers
        ``http://192.168.1.20:8080/``.
        """
        names = [allowed_host(v) for v in allowed]
        if listen and listen not in WILDCARDS:
            bound = parse_authority(f"[{listen.strip('[]')}]" if ":" in listen else listen)
            if bound is not None:
                names.append((bound[0], port or None))
        return cls(port or None, tuple(dict.fromkeys(names)))

    def serves(self, authority: str | None) -> bool:
        """Whether a ``Host`` header (or an Origin's host and port) names this dashboard."""
        parsed = parse_authority(authority) if authority and len(authority) <= 300 else None
        if parsed is None:
            return False
        name, port = parsed
        if name in SERVED_LOOPBACK and (port is None or self.port is None or port == self.port):
            return True
        return any(name == n and (p is None or p == port) for n, p in self.allowed)

    def same_origin(self, origin: str | None, fetch_site: str | None) -> bool:
        """Whether an unsafe request (a POST) comes from a page of this dashboard.

        By its ``Origin`` when the browser sends one (an http or https URL whose host this
        dashboard serves); else by ``Sec-Fetch-Site`` (``same-origin`` or ``none``: typed by
        the user); a request with neither (curl, a script) is let through to the CSRF check.
        """
        if origin is not None:
            try:
                parts = urlsplit(origin.strip())
            except ValueError:
                return False
            return parts.scheme in ("http", "https") and not parts.path and self.serves(parts.netloc)
        return fetch_site is None or fetch_site.strip().lower() in ("same-origin", "none")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; beyond it the request is refused before anything is read."""

    max_query: int = 2048  # characters of the query string (414 beyond)
    max_body: int = 64 * 1024  # bytes of a form (413 beyond)
    max_page: int = 100  # jobs per page (400 beyond)
    max_ids: int = 1000  # job ids in one bulk action (400 beyond)
    max_field: int = 300  # characters of one filter or name (400 beyond)
