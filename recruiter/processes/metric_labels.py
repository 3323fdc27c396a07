"""The tenant label of a worker's job metrics (``--metrics-tenant-labels``), kept to a bounded number of values.

Every value of a label is a series of each metric it labels (with the group and the outcome,
about 48 per tenant on a worker), so a worker seeing a thousand tenants would serve tens of
thousands of series. :class:`TenantLabels` gives the first ``cap`` tenants a worker process
sees their own label and every later one :data:`OVERFLOW`: the series stay bounded, their sums
stay exact, and a tenant keeps its label for the life of the process.

Invariant: called from the event loop's thread (the bus); ``label`` never raises.
"""

from __future__ import annotations

import structlog

OVERFLOW = "_other"  # the label of every tenant past the cap
DEFAULT_CAP = 100

log = structlog.get_logger("recruiter.metrics")


class TenantLabels:
    """The first ``cap`` tenants seen are labelled by name, the others :data:`OVERFLOW` (logged once)."""

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        if cap < 1:
            raise ValueError(f"--metrics-tenant-labels-max {cap}: give at least 1")
        self.cap = cap
        self._named: set[str] = set()
        self.overflowed = False

    def label(self, tenant: str) -> str:
        if tenant in self._named:
            return tenant
        if len(self._named) < self.cap:
            self._named.add(tenant)
            return tenant
        if not self.overflowed:
            self.overflowed = True
            log.warning("metrics.tenant_labels_capped", cap=self.cap, label=OVERFLOW,
                        hint="later tenants are counted under this label; raise --metrics-tenant-labels-max")
        return OVERFLOW
