"""``recruiter groups|tenants pause|resume|list``: the pause switches.

Invariant: a pause names only groups or tenants that a job or a worker has used,
unless ``--force`` says so (a typo would otherwise pause nothing, silently);
every command prints the paused names as they are after it.
"""

from __future__ import annotations

import json

import click

from recruiter.admin import switches
from recruiter.admin.status import PausedNames
from recruiter.cli.options import Common, common_options, connect_target, connection_error
from recruiter.cli.output import echo
from recruiter.domain import control
from recruiter.domain.naming import name_problem
from recruiter.processes import logs
from recruiter.store import (
    ConnectionProblem,
    StoreError,
    SyncDb,
    Target,
    command_listeners,
    describe,
    sync_client,
    sync_db,
)


@click.group("groups")
def groups_group() -> None:
    """Pause and resume groups: a paused group's jobs stay queued and are not assigned."""


@click.group("tenants")
def tenants_group() -> None:
    """Pause and resume tenants: a paused tenant's jobs stay queued and are not assigned."""


def _switch_commands(group: click.Group, kind: str) -> None:
    plural = control.KINDS[kind]

    @group.command("pause")
    @click.argument("names", nargs=-1, required=True)
    @click.option("--force", is_flag=True, help=f"Pause even a {kind} that no job or worker has used.")
    @common_options
    def pause(names: tuple[str, ...], force: bool, common: Common) -> None:
        _switch(kind, names, True, common, force=force)

    @group.command("resume")
    @click.argument("names", nargs=-1, required=True)
    @common_options
    def resume(names: tuple[str, ...], common: Common) -> None:
        _switch(kind, names, False, common)

    @group.command("list")
    @click.option("--json", "as_json", is_flag=True, help=f"Print the paused {plural} as a JSON array.")
    @common_options
    def list_(as_json: bool, common: Common) -> None:
        _switch(kind, (), None, common, as_json=as_json)

    pause.help = (f"Pause {plural}: the recruiter stops assigning their jobs from its next round. "
                  f"A {kind} that no job or worker has ever used is refused without --force (a typo?).")
    resume.help = f"Resume paused {plural}."
    list_.help = f"List the paused {plural}."


def _switch(kind: str, names: tuple[str, ...], pause: bool | None, common: Common, *,
            force: bool = False, as_json: bool = False) -> None:
    """Pause (True), resume (False) or list (None) groups or tenants, then print the paused ones."""
    logs.configure(common.log_level, common.log_format)
    for name in names:
        problem = name_problem(kind, name)
        if problem:
            raise click.UsageError(problem)
    target: Target | None = None
    try:
        target = connect_target(common)
        client = sync_client(target, app_name="recruiter-cli", event_listeners=command_listeners())
        try:
            db = sync_db(client, target)
            paused = _apply(db, kind, names, pause, force)
        finally:
            client.close()
    except ConnectionProblem as exc:
        raise connection_error(exc) from None
    except StoreError as exc:
        if common.debug or target is None:
            raise
        raise click.ClickException(describe(exc, target)) from None
    now = list(paused.groups if kind == "group" else paused.tenants)
    if as_json:
        echo(json.dumps(now))
        return
    echo(f"paused {control.KINDS[kind]}: " + (", ".join(now) if now else "none"))


def _apply(db: SyncDb, kind: str, names: tuple[str, ...], pause: bool | None, force: bool) -> PausedNames:
    """The read model's switch (:mod:`recruiter.admin.switches`); pausing names that no job or worker has
    used is refused, or with ``force`` warned about."""
    if pause is None:
        return switches.paused(db)
    if not pause:
        done = switches.resume(db, kind, names)
        if done.not_paused:
            echo(f"not paused, nothing to resume: {', '.join(done.not_paused)}", err=True)
        return done.paused
    try:
        done = switches.pause(db, kind, names, force=force)
    except switches.UnusedNames as exc:
        raise click.ClickException(f"{exc} (a typo?); nothing was paused. Pause anyway with --force") from None
    if done.unused:
        echo(f"Warning: {switches.describe_unused(kind, done.unused)}; pausing anyway (--force)", err=True)
    return done.paused


_switch_commands(groups_group, "group")
_switch_commands(tenants_group, "tenant")
