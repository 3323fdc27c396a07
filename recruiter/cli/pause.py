"""``recruiter groups|tenants pause|resume|list``: the pause switches.

Invariant: a pause names only groups or tenants that a job or a worker has used,
unless ``--force`` says so (a typo would otherwise pause nothing, silently);
every command prints the paused names as they are after it.
"""

from __future__ import annotations

import json

import click

from recruiter.cli.options import Common, common_options, connect_target
from recruiter.domain import control
from recruiter.domain.naming import name_problem
from recruiter.processes import logs
from recruiter.store import (
    ConnectionProblem,
    StoreError,
    SyncCollections,
    SyncDb,
    Target,
    describe,
    ensure_indexes_sync,
    read_paused,
    switch_paused,
    sync_client,
    unused_names,
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
        client = sync_client(target, app_name="recruiter-cli")
        try:
            db = client[target.database]
            if pause:
                _check_used(db, kind, list(names), force)
            metadata = SyncCollections.of(db).metadata
            before = read_paused(metadata)
            paused = before if pause is None else switch_paused(metadata, kind, list(names), pause)
        finally:
            client.close()
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
    except StoreError as exc:
        if common.debug or target is None:
            raise
        raise click.ClickException(describe(exc, target)) from None
    now = sorted(paused.groups if kind == "group" else paused.tenants)
    idle = sorted(set(names) - set(before.groups if kind == "group" else before.tenants))
    if pause is False and idle:
        click.echo(f"not paused, nothing to resume: {', '.join(idle)}", err=True)
    if as_json:
        click.echo(json.dumps(now))
        return
    click.echo(f"paused {control.KINDS[kind]}: " + (", ".join(now) if now else "none"))


def _check_used(db: SyncDb, kind: str, names: list[str], force: bool) -> None:
    """Refuse (or, with ``force``, warn about) pausing names that no job or worker has used."""
    ensure_indexes_sync(db)  # the checks are served by indexes; a fresh database has none yet
    unused = unused_names(db, kind, names)
    if not unused:
        return
    listed = ", ".join(repr(n) for n in unused)
    what = f"no job or worker has ever used the {kind}{'s' if len(unused) > 1 else ''} {listed}"
    if not force:
        raise click.ClickException(f"{what} (a typo?); nothing was paused. Pause anyway with --force")
    click.echo(f"Warning: {what}; pausing anyway (--force)", err=True)


_switch_commands(groups_group, "group")
_switch_commands(tenants_group, "tenant")
