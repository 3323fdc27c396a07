"""Who may use the dashboard, and how each request is bounded before a page reads anything.

- **Access** (:class:`Access`): none (the default, on a loopback address only), a bearer
  token (``Authorization: Bearer T``, or basic auth with any user and the token as
  password, so a browser can ask for it), or a user and password (basic auth).
  :func:`check_binding` refuses to serve beyond localhost without one.
- **CSRF** (:class:`Csrf`): a signed double-submit token. Every page sets a cookie
  holding a random nonce and its HMAC under a secret made when the process starts;
  every form carries the same value. A POST is accepted only when both are present,
  equal and correctly signed, so another site can neither read nor forge one.
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
import secrets
from dataclasses import dataclass, field

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})
CSRF_COOKIE = "recruiter_csrf"
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


class Csrf:
    """Signed double-submit tokens under a key made for this process (restarting invalidates old forms)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def issue(self) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._sign(nonce)}"

    def valid(self, token: str | None) -> bool:
        """Whether ``token`` was issued by this process (any string is safe to pass)."""
        if not token or len(token) > 200:
            return False
        nonce, sep, signature = token.partition(".")
        return bool(sep and nonce) and hmac.compare_digest(signature.encode(), self._sign(nonce).encode())

    def accepts(self, cookie: str | None, submitted: str | None) -> bool:
        """A POST's check: the cookie and the form's field are both there, equal, and signed by this process."""
        if not cookie or not submitted:
            return False
        return hmac.compare_digest(cookie.encode(), submitted.encode()) and self.valid(cookie)

    def _sign(self, nonce: str) -> str:
        digest = hmac.new(self._key, nonce.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; beyond it the request is refused before anything is read."""

    max_query: int = 2048  # characters of the query string (414 beyond)
    max_body: int = 64 * 1024  # bytes of a form (413 beyond)
    max_page: int = 100  # jobs per page (400 beyond)
    max_ids: int = 1000  # job ids in one bulk action (400 beyond)
    max_field: int = 300  # characters of one filter or name (400 beyond)
