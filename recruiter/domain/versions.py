"""Releases: this one's version, the skew rule, and the release a stored document records (pure).

The version is written once, here (:data:`RELEASE`): ``pyproject.toml`` reads it
(``[tool.setuptools.dynamic]``), ``recruiter.__version__`` is it, and every
program's ``--version`` prints it.

**The skew rule.** A release works beside the one before it (:data:`WORKS_BESIDE`),
in every role and in every order: leader, standby, cleaner, workers, producers, the CLI
and the dashboard. A change of a stored format is made in steps, so that both read what
the other writes (``CHANGELOG.md``, ``docs/operations/deploys.md``).

Every process records its release in what it registers (:func:`record`, as the field
:data:`FIELD`): each roster entry, its heartbeat document, the lease it holds (with the
owner, since an older holder taking the lease over leaves the field as it found it).
Two releases work side by side when each is at least the oldest the other works beside
(:func:`beside`): the older one cannot know what a newer one needs, so the newer one
records the oldest it works beside, and both judge alike. A document that records no
release comes from :data:`UNRECORDED` or older (0.2.0 is the first release that records
one); what it works beside is not known, and is not held against it.

A process that records no release is not refused (its release is not known; ``status`` warns
that releases are mixed): a roster entry written by hand or by a tool must not be starved,
and an operator upgrading from 0.1.1 goes through 0.2.0 (CHANGELOG.md).

Invariant: a recorded release is untrusted input, never raises: a field that is there but
cannot be read is :data:`UNREADABLE` (shown so), a field that is absent :data:`UNRECORDED`
or older; neither is held against its process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# This release. Bump it with each release, with its section in CHANGELOG.md.
RELEASE = "0.3.0"
# The oldest release this one works beside: the one before it (CHANGELOG.md).
WORKS_BESIDE = "0.2.0"
# The release a document recording none comes from, at the newest: the last that recorded none.
UNRECORDED = "0.1.1"
# The field of a roster entry, a heartbeat document or a lease that records the writer's release.
FIELD = "release"
# Where the rule and the procedures are written down, named in every refusal.
DEPLOYS = "docs/operations/deploys.md"

_VERSION = re.compile(r"^(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?:[.+-]?[0-9A-Za-z.+-]{0,40})?$")


def parse(version: object) -> tuple[int, int, int] | None:
    """``"0.2.0"`` as ``(0, 2, 0)`` (a suffix such as ``.dev1`` or ``rc1`` is ignored); None if unreadable."""
    found = _VERSION.match(version) if isinstance(version, str) else None
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


@dataclass(frozen=True)
class Release:
    """A process's release as a document records it. ``recorded`` False: the document records
    none (or an unreadable one), and ``version`` is :data:`UNRECORDED`, the newest it can be."""

    version: str
    works_beside: str | None
    recorded: bool = True
    readable: bool = True

    @property
    def shown(self) -> str:
        """How status and log lines name it: ``0.2.0``, or ``0.1.1 or older (none recorded)``."""
        if not self.readable:
            return "unreadable (not held against it)"
        return self.version if self.recorded else f"{UNRECORDED} or older (none recorded)"


THIS = Release(RELEASE, WORKS_BESIDE)
UNKNOWN = Release(UNRECORDED, None, recorded=False)
# A release field that is there but cannot be read: judged as this release's oldest neighbour.
UNREADABLE = Release(WORKS_BESIDE, None, recorded=False, readable=False)


def record() -> dict[str, str]:
    """What a process of this release writes under :data:`FIELD`."""
    return {"version": RELEASE, "works_beside": WORKS_BESIDE}


def recorded(doc: Mapping[str, object], owner: object = None) -> Release:
    """The release ``doc`` records under :data:`FIELD` (a roster entry, a heartbeat, a lease).
    With ``owner`` (a lease), only a record naming that owner counts: an older holder that took
    the lease over left the field of the one before it."""
    value = doc.get(FIELD)
    if value is None:
        return UNKNOWN
    if not isinstance(value, Mapping) or parse(value.get("version")) is None:
        return UNREADABLE
    if owner is not None and value.get("owner") != owner:
        return UNKNOWN
    oldest = value.get("works_beside")
    return Release(str(value["version"]), str(oldest) if parse(oldest) is not None else None)


def _key(version: str) -> tuple[int, int, int]:
    return parse(version) or (0, 0, 0)


def older(a: str, b: str) -> bool:
    """Whether version ``a`` is older than ``b``."""
    return _key(a) < _key(b)


def beside(other: Release, me: Release = THIS) -> bool:
    """Whether ``other`` and ``me`` work side by side: each at least the oldest the other works
    beside (an oldest not recorded is not held against anyone). Symmetric."""
    if not (other.recorded and me.recorded):
        return True  # a release not recorded (or unreadable) is not known: not held against anyone
    return (not (me.works_beside and older(other.version, me.works_beside))
            and not (other.works_beside and older(me.version, other.works_beside)))


def refusal(other: Release, role: str, me: Release = THIS) -> str | None:
    """One line saying why a ``role`` process of release ``other`` and this one do not work side by
    side, naming both versions and what to do; None when they do."""
    if beside(other, me):
        return None
    if older(other.version, me.version):
        return (f"the {role} runs recruiter {other.shown}, older than {me.works_beside}, the oldest this "
                f"release ({me.version}) works beside: upgrade the {role} to {me.works_beside} or later, "
                f"or stop every process and start this release ({DEPLOYS})")
    return (f"the {role} runs recruiter {other.version}, which works beside {other.works_beside} and later, "
            f"not this release ({me.version}): upgrade this process to {other.works_beside} or later ({DEPLOYS})")


def newest_first(versions: list[Release]) -> list[Release]:
    """``versions`` without repeats, the newest first (an unrecorded one last)."""
    unique = {(r.version, r.recorded): r for r in versions}
    return sorted(unique.values(), key=lambda r: (r.recorded, _key(r.version)), reverse=True)
