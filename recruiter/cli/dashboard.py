"""``recruiter dashboard``: serve the web dashboard (:mod:`recruiter.web`) on one address.

Invariant: the command only parses and checks its options (a host beyond localhost
without a token or a password is a usage error, exit 2, before anything starts),
connects, and serves :func:`recruiter.web.create_app`; the extra it needs
(``recruiter[dashboard]``) is imported here, and its absence is one line.
"""

from __future__ import annotations

from datetime import timedelta

import click
import structlog

from recruiter.cli.options import DURATION, Common, common_options, connect_target, connection_error, env, valid
from recruiter.processes import logs
from recruiter.store import ConnectionProblem, StoreError, command_listeners, describe, sync_client, sync_db

INSTALL_HINT = "the dashboard needs its extra: pip install 'recruiter[dashboard]'"
log = structlog.get_logger("recruiter.web")


@click.command("dashboard")
@click.option("--host", envvar=env("DASHBOARD_HOST"), default="127.0.0.1", show_default=True, show_envvar=True,
              help="Address to listen on. Beyond localhost, --token or --user/--password is required.")
@click.option("--port", envvar=env("DASHBOARD_PORT"), type=click.IntRange(0, 65535), default=8080,
              show_default=True, show_envvar=True, help="Port to listen on (0: any free port).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, envvar=env("DASHBOARD_ALLOWED_HOST"),
              show_envvar=True, metavar="NAME[:PORT]",
              help="Also answer for this host name (repeatable; the environment variable takes several, separated "
                   "by spaces): the name a reverse proxy forwards, or the browser's. By default only 127.0.0.1, "
                   "localhost, [::1] and the --host address, on --port; any other Host is refused (400), and a POST "
                   "from another origin (403).")
@click.option("--read-only", envvar=env("DASHBOARD_READ_ONLY"), is_flag=True, show_envvar=True,
              help="Show everything, offer no action (no retry, cancel, pause, stop...).")
@click.option("--token", envvar=env("DASHBOARD_TOKEN"), show_envvar=True,
              help="Require this token: 'Authorization: Bearer TOKEN', or basic auth with it as password.")
@click.option("--user", envvar=env("DASHBOARD_USER"), show_envvar=True,
              help="Require basic auth with this user (and --password).")
@click.option("--password", envvar=env("DASHBOARD_PASSWORD"), show_envvar=True,
              help="The password of --user (prefer the environment variable to the command line).")
@click.option("--refresh", type=DURATION, default="2s", show_default=True, envvar=env("DASHBOARD_REFRESH"),
              show_envvar=True, help="Live pages poll this often; the server reads the figures at most once per "
                                     "period, however many pages are open (at least 1s).")
@common_options
def dashboard_command(host: str, port: int, allowed_hosts: tuple[str, ...], read_only: bool, token: str | None,
                      user: str | None, password: str | None, refresh: timedelta, common: Common) -> None:
    """Serve the web dashboard: overview, jobs, failures, workers, schedules, pause switches and their actions."""
    try:
        import uvicorn

        from recruiter.web import Access, Hosts, Settings, check_binding, create_app
    except ImportError:
        raise click.ClickException(INSTALL_HINT) from None
    access = valid(lambda: Access(token=token, user=user, password=password))
    valid(lambda: check_binding(host, access))
    hosts = valid(lambda: Hosts.of(port, allowed_hosts, listen=host))
    if refresh < timedelta(seconds=1):
        raise click.UsageError("--refresh must be at least 1s")
    logs.configure(common.log_level, common.log_format)
    try:
        target = connect_target(common)
    except ConnectionProblem as exc:
        raise connection_error(exc) from None
    client = sync_client(target, app_name="recruiter-dashboard", server_selection_timeout_s=5.0,
                         event_listeners=command_listeners())  # RECRUITER_COMMAND_STATS, if set
    try:
        hidden = tuple(s for s in (_password_of(common.target), token, password) if s)
        settings = Settings(read_only=read_only, access=access, hosts=hosts, refresh_s=refresh.total_seconds(),
                            database=target.display + (f" (prefix {target.prefix})" if target.prefix else ""),
                            hidden=hidden)
        app = create_app(sync_db(client, target), settings)
        log.info("dashboard.serving", url=f"http://{host}:{port}/", database=target.display, read_only=read_only,
                 auth="token" if token else "basic" if user else "none", allowed_hosts=list(allowed_hosts))
        uvicorn.run(app, host=host, port=port, log_level="debug" if common.debug else "warning",
                    access_log=common.debug, server_header=False)
    except StoreError as exc:
        raise click.ClickException(describe(exc, target)) from None
    finally:
        client.close()


def _password_of(uri: str) -> str | None:
    """The password in a ``mongodb://user:password@host`` URI, to mask it wherever it might be echoed."""
    head = uri.split("://", 1)[-1].split("/", 1)[0]
    if "@" not in head:
        return None
    credentials = head.rsplit("@", 1)[0]
    return credentials.split(":", 1)[1] if ":" in credentials else None
