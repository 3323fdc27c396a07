"""Label values kept to a bounded number: the tenant label of a worker's job metrics
(``--metrics-tenant-labels``), and the workflow label of a leader's archived steps and of the
recruiter's running workflows.

Every value of a label is a series of each metric it labels (with the group and the outcome,
about 48 per tenant on a worker), so a worker seeing a thousand tenants would serve tens of
thousands of series. :class:`CappedLabels` gives the first ``cap`` values a process sees their
own label and every later one :data:`OVERFLOW`: the series stay bounded, their sums stay exact,
and a value keeps its label for the life of the process.

Invariant: each instance is called from one thread at a time (the event loop's, through the bus; the
cluster reader's, under its collector's lock); ``label`` never raises.
"""

from __future__ import annotations

import structlog

from recruiter.domain.workflow import MALFORMED

OVERFLOW = "_other"  # the label of every value past the cap
DEFAULT_CAP = 100
LABEL_LIMIT = 100  # characters of a label value (a group, a tenant, a reason, a workflow)
# The workflow names labelled as they are. A workflow's name cannot start with "_" nor "(", so
# neither OVERFLOW nor MALFORMED (a step whose stored tag is malformed) is any workflow's own.
WORKFLOW_LABELS_MAX = DEFAULT_CAP

log = structlog.get_logger("recruiter.metrics")


class CappedLabels:
    """The first ``cap`` values seen are labelled as they are, the others :data:`OVERFLOW` (logged once,
    as ``metrics.<what>_labels_capped``, with ``hint``)."""

    def __init__(self, cap: int = DEFAULT_CAP, *, what: str = "tenant",
                 hint: str = "later tenants are counted under this label; raise --metrics-tenant-labels-max") -> None:
        if cap < 1:
            raise ValueError(f"--metrics-{what}-labels-max {cap}: give at least 1")
        self.cap = cap
        self.what = what
        self.hint = hint
        self._named: set[str] = set()
        self.overflowed = False

    def label(self, value: str) -> str:
        if value in self._named:
            return value
        if len(self._named) < self.cap:
            self._named.add(value)
            return value
        if not self.overflowed:
            self.overflowed = True
            log.warning(f"metrics.{self.what}_labels_capped", cap=self.cap, label=OVERFLOW, hint=self.hint)
        return OVERFLOW


TenantLabels = CappedLabels  # the tenant label's (its defaults)


class WorkflowLabels(CappedLabels):
    """The workflow label of ``recruiter_workflow_steps_archived_total`` and ``recruiter_workflows_running``:
    the first :data:`WORKFLOW_LABELS_MAX` workflow names a process counts."""

    def __init__(self) -> None:
        super().__init__(WORKFLOW_LABELS_MAX, what="workflow",
                         hint="later workflow names are counted under this label")

    def of(self, name: object) -> str:
        """The label of a step of ``name`` (an event's, untrusted): :data:`MALFORMED` when it is not a name."""
        if not isinstance(name, str) or not name or name == MALFORMED:
            return MALFORMED
        return self.label(name[:LABEL_LIMIT])

    def summed(self, counts: dict[str, int]) -> dict[str, int]:
        """``counts`` by workflow name, by label: the names past the cap summed under :data:`OVERFLOW`."""
        out: dict[str, int] = {}
        for name, n in counts.items():
            label = self.of(name)
            out[label] = out.get(label, 0) + n
        return out
