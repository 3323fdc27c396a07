"""``recruiter history``: jobs done, failed and their wait over time, per minute or hour (the ``timeline``
the leading recruiter writes), read through :func:`recruiter.admin.timeline.history`.

A bucket no leader recorded is printed as ``(not recorded)``: a gap, not a zero.
"""

from __future__ import annotations

import json
from typing import Any

import click

from recruiter.admin.timeline import DEFAULT_RANGE, RANGES, History, history
from recruiter.cli.options import env, target_option
from recruiter.cli.output import echo
from recruiter.domain.timeline import Series
from recruiter.store import ConnectionProblem, ServerClock, StoreError, Target, describe, sync_client, sync_db


@click.command("history")
@click.option("--range", "range_name", type=click.Choice(list(RANGES)), default=DEFAULT_RANGE, show_default=True,
              envvar=env("HISTORY_RANGE"), show_envvar=True,
              help="How far back: per minute up to 24h, per hour for 7d and 30d.")
@click.option("--group", default=None, envvar=env("HISTORY_GROUP"), show_envvar=True,
              help="One group's history (default: the whole queue).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: one object per bucket, null where not recorded.")
@target_option
def history_command(range_name: str, group: str | None, as_json: bool, target: Target) -> None:
    """Jobs done and failed and their wait (from due to start) over time, as the leading recruiter
    wrote them once a minute; buckets no leader recorded are shown as gaps."""
    try:
        t = target
        client = sync_client(t, app_name="recruiter-history", server_selection_timeout_s=5.0)
        try:
            clock = ServerClock()
            clock.calibrate_sync(client, samples=1)
            found = history(sync_db(client, t), clock.now(), range_name, group)
        except StoreError as exc:
            raise click.ClickException(describe(exc, t)) from None
        finally:
            client.close()
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
    echo(json.dumps(history_json(found), indent=2) if as_json else render_history(found))


def _series(h: History) -> Series:
    return h.total if h.of_group is None else h.of_group


def history_json(h: History) -> dict[str, Any]:
    series = _series(h)
    return {"range": h.range, "resolution": series.resolution, "group": h.group, "malformed": series.malformed,
            "buckets": [{"at": at.isoformat(), **({"done": t.done, "failed": t.failed, "wait_mean_s": t.wait_mean_s,
                                                    "wait_max_s": t.wait_max_s if t.wait_n else None}
                                                   if t is not None else {"recorded": False})}
                        for at, t in series.points]}


def _visible(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def render_history(h: History) -> str:
    series = _series(h)
    unit = "minute" if series.resolution == "m" else "hour"
    who = "the whole queue" if h.group is None else f"group {_visible(h.group)}"
    rows = [("bucket (UTC)", "done", "failed", "wait mean s", "wait max s")]
    for at, t in series.points:
        when = at.strftime("%Y-%m-%d %H:%M")
        if t is None:
            rows.append((when, "(not recorded)", "", "", ""))
        else:
            mean = t.wait_mean_s
            rows.append((when, str(t.done), str(t.failed), "-" if mean is None else f"{mean:.3f}",
                         f"{t.wait_max_s:.3f}" if t.wait_n else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"History of {who}, per {unit}, last {h.range}:"]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
              .rstrip() for r in rows]
    recorded = [t for _, t in series.points if t is not None]
    lines.append(f"total: {sum(t.done for t in recorded)} done, {sum(t.failed for t in recorded)} failed; "
                 f"{len(series.points) - len(recorded)} of {len(series.points)} buckets not recorded")
    if series.malformed:
        lines.append(f"{series.malformed} malformed bucket documents set aside")
    return "\n".join(lines)
