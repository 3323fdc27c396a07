"""``--metrics-port``, ``--metrics-host`` (and the worker's ``--metrics-tenant-labels``): a process's
Prometheus metrics (:mod:`recruiter.processes.metrics`, docs/operations/metrics.md).

Invariant: the command receives them as one ``metrics`` argument, a
:class:`recruiter.processes.metrics.MetricsConfig`, or None when ``--metrics-port`` is not given
(then no metric is kept and no port is opened).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import click

from recruiter.cli.options import Command, env
from recruiter.processes.metric_labels import DEFAULT_CAP, OVERFLOW
from recruiter.processes.metrics import MetricsConfig


def metrics_options(role: str, *, tenant_labels: bool = False) -> Callable[[Command], Command]:
    """Adds the metrics options of the process ``role``; ``tenant_labels``: also ``--metrics-tenant-labels``."""

    def decorate(fn: Command) -> Command:
        @functools.wraps(fn)
        def with_metrics(*args: object, metrics_port: int | None, metrics_host: str,
                         metrics_tenant_labels: bool = False, metrics_tenant_labels_max: int = DEFAULT_CAP,
                         **kwargs: object) -> None:
            config = None if metrics_port is None else MetricsConfig(role, metrics_port, metrics_host,
                                                                      metrics_tenant_labels, metrics_tenant_labels_max)
            fn(*args, metrics=config, **kwargs)

        options: list[Callable[[Command], Command]] = [
            click.option("--metrics-port", envvar=env("METRICS_PORT"), type=click.IntRange(0, 65535), default=None,
                         show_envvar=True, metavar="PORT",
                         help="Serve Prometheus metrics on http://HOST:PORT/metrics (default: off; 0: any free port, "
                              "logged as metrics.serving; docs/operations/metrics.md)."),
            click.option("--metrics-host", envvar=env("METRICS_HOST"), default="127.0.0.1", show_default=True,
                         show_envvar=True, help="Address the metrics server listens on (0.0.0.0: every interface)."),
        ]
        if tenant_labels:
            options.append(click.option(
                "--metrics-tenant-labels", envvar=env("METRICS_TENANT_LABELS"), is_flag=True, default=False,
                show_envvar=True,
                help="Also label the job metrics by tenant: one series per group, tenant (and outcome), for the "
                     "first --metrics-tenant-labels-max tenants the process sees; later ones are labelled "
                     f"tenant=\"{OVERFLOW}\"."))
            options.append(click.option(
                "--metrics-tenant-labels-max", envvar=env("METRICS_TENANT_LABELS_MAX"), type=click.IntRange(1),
                default=DEFAULT_CAP, show_default=True, show_envvar=True, metavar="N",
                help="Tenants labelled by name with --metrics-tenant-labels: bounds the series a worker serves."))
        command: Command = with_metrics
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
