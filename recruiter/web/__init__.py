"""The web dashboard (``recruiter dashboard``): the read model as pages, and the operator's actions.

A Starlette application (:func:`create_app`) rendering Jinja2 templates on the
server, with htmx (one vendored file, ``static/htmx.min.js``) for the live parts
and the confirmations: ``pip install 'recruiter[dashboard]'`` is all it needs, no
JavaScript build. It reads and acts only through :class:`recruiter.admin.Admin`,
and records each action in the ``audit`` collection. See
``docs/operations/dashboard.md``.

Layering: above the read model (``recruiter.admin``) and the processes, below the
CLI, which only parses the command's options and serves the application.
"""

from recruiter.web.app import Cached, Settings, create_app
from recruiter.web.security import Access, Csrf, Hosts, Limits, check_binding, is_loopback

__all__ = ["Access", "Cached", "Csrf", "Hosts", "Limits", "Settings", "check_binding", "create_app", "is_loopback"]
