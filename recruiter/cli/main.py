"""Command line: ``recruiter start``, ``worker start``, ``cleaner start`` and friends.

Commands are thin: they parse and validate options into frozen configs, set up
logging, connect, and hand the process objects to :mod:`recruiter.processes.runtime`.
Every option can also be given as an environment variable (shown in ``--help``);
the MongoDB URI comes from ``--target``, ``RECRUITER_MONGODB_URI`` or ``MONGODB_URI``.

Invariant: this module only assembles the command groups; each group lives in
its own module (:mod:`~recruiter.cli.processes`, :mod:`~recruiter.cli.admin`, :mod:`~recruiter.cli.jobs`,
:mod:`~recruiter.cli.pause`, :mod:`~recruiter.cli.embedded`,
:mod:`~recruiter.cli.schedules`, :mod:`~recruiter.cli.dashboard`), the shared options
in :mod:`~recruiter.cli.options`.
"""

from __future__ import annotations

import click

from recruiter.cli.admin import status, workers_group
from recruiter.cli.dashboard import dashboard_command
from recruiter.cli.embedded import embedded_group
from recruiter.cli.history import history_command
from recruiter.cli.jobs import jobs_group
from recruiter.cli.limits import limits_group
from recruiter.cli.options import CONTEXT, VERSION_MESSAGE
from recruiter.cli.pause import groups_group, tenants_group
from recruiter.cli.processes import cleaner_group, start_recruiter, worker_group
from recruiter.cli.schedules import schedules_group
from recruiter.cli.stats import stats_command
from recruiter.cli.workflows import workflows_group
from recruiter.domain.versions import RELEASE


@click.group(context_settings=CONTEXT)
@click.version_option(RELEASE, message=VERSION_MESSAGE)
def main() -> None:
    """recruiter: a job queue on MongoDB with one central recruiter."""


for _command in (start_recruiter, worker_group, cleaner_group, embedded_group, status, workers_group, jobs_group,
                 groups_group, tenants_group, schedules_group, stats_command, limits_group, dashboard_command,
                 history_command, workflows_group):
    main.add_command(_command)


def recruiter_main() -> None:
    """Entry point of the ``recruiter`` command."""
    main(prog_name="recruiter")


def worker_main() -> None:
    """Entry point of the ``worker`` command (and ``bin/worker``): ``worker start ...``."""
    worker_group(prog_name="worker")


def cleaner_main() -> None:
    """Entry point of the ``cleaner`` command (and ``bin/cleaner``): ``cleaner start ...``."""
    cleaner_group(prog_name="cleaner")


if __name__ == "__main__":
    recruiter_main()
