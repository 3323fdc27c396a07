"""The store: the only code that calls PyMongo.

One module per collection (``scheduled``, ``archived``, ``roster``, ``heartbeats``,
``metadata``) plus leases, indexes, transactions, the server clock, change streams
and command monitoring. Each fenced filter and each update document is written
once, here; the processes call these functions with values from the domain.

The names below are the store's public surface for the edges: the command line
(``recruiter.cli``), the process runtime and the producer import these, and
never a module of the store by name.
"""

from recruiter.store.archived import count_by_why
from recruiter.store.audit import AuditEntry, ensure_audit_index, recent_actions, record_action
from recruiter.store.cancel import cancel_job, cancel_job_async
from recruiter.store.clock import ServerClock
from recruiter.store.connection import (
    DEFAULT_URI,
    URI_ENVVARS,
    ConnectionProblem,
    DeploymentRefused,
    StoreError,
    Target,
    answers_ping,
    answers_ping_within,
    async_client,
    async_db,
    check_deployment,
    describe,
    first_line,
    heartbeat_client,
    parse_target,
    sync_client,
    sync_db,
    wait_until_reachable,
)
from recruiter.store.deadlines import is_timeout, within
from recruiter.store.following import JobDocuments, read_job_documents
from recruiter.store.halting import read_running_in_sync
from recruiter.store.heartbeats import heartbeats_by_worker
from recruiter.store.history import Page, archived_with_why, insert_jobs, list_jobs, read_retry_originals
from recruiter.store.indexes import ensure_indexes, ensure_indexes_sync
from recruiter.store.layout import AsyncClient, AsyncDb, Collections, Document, SyncClient, SyncCollections, SyncDb
from recruiter.store.metadata import (
    clear_limit,
    read_cursor_document,
    read_leases,
    read_limits_document,
    read_paused,
    replace_limits,
    set_limit,
    switch_paused,
    unused_names,
)
from recruiter.store.monitoring import CommandStats
from recruiter.store.monitoring import listeners as command_listeners
from recruiter.store.names import PREFIX_ENVVAR, prefix_problem, shared_database_warning, shared_database_warning_async
from recruiter.store.retries import RETRIED_AS, RetryWritten, retry_once
from recruiter.store.roster import entries_by_id, longest_heartbeat_interval, request_stop
from recruiter.store.schedule_admin import (
    Change,
    pause_schedule,
    read_last_jobs,
    read_schedule,
    read_schedules,
    remove_schedule,
    request_run_now,
    resume_schedule,
)
from recruiter.store.scheduled import count_by_status, read_locked_in_sync
from recruiter.store.timeline import read_buckets, read_groups
from recruiter.store.waiting import count_ahead, read_beats_of, read_entries_taking, read_entry_of
from recruiter.store.waiting_actions import delete_waiting, retry_now
from recruiter.store.wakeup import Wake

__all__ = [
    "DEFAULT_URI",
    "PREFIX_ENVVAR",
    "RETRIED_AS",
    "URI_ENVVARS",
    "AsyncClient",
    "AsyncDb",
    "AuditEntry",
    "Change",
    "Collections",
    "CommandStats",
    "ConnectionProblem",
    "DeploymentRefused",
    "Document",
    "JobDocuments",
    "Page",
    "RetryWritten",
    "ServerClock",
    "StoreError",
    "SyncClient",
    "SyncCollections",
    "SyncDb",
    "Target",
    "Wake",
    "answers_ping",
    "answers_ping_within",
    "archived_with_why",
    "async_client",
    "async_db",
    "cancel_job",
    "cancel_job_async",
    "check_deployment",
    "clear_limit",
    "command_listeners",
    "count_ahead",
    "count_by_status",
    "count_by_why",
    "delete_waiting",
    "describe",
    "ensure_audit_index",
    "ensure_indexes",
    "ensure_indexes_sync",
    "entries_by_id",
    "first_line",
    "heartbeat_client",
    "heartbeats_by_worker",
    "insert_jobs",
    "is_timeout",
    "list_jobs",
    "longest_heartbeat_interval",
    "parse_target",
    "pause_schedule",
    "prefix_problem",
    "read_beats_of",
    "read_buckets",
    "read_cursor_document",
    "read_entries_taking",
    "read_entry_of",
    "read_groups",
    "read_job_documents",
    "read_last_jobs",
    "read_leases",
    "read_limits_document",
    "read_locked_in_sync",
    "read_paused",
    "read_retry_originals",
    "read_running_in_sync",
    "read_schedule",
    "read_schedules",
    "recent_actions",
    "record_action",
    "remove_schedule",
    "replace_limits",
    "request_run_now",
    "request_stop",
    "resume_schedule",
    "retry_now",
    "retry_once",
    "set_limit",
    "shared_database_warning",
    "shared_database_warning_async",
    "switch_paused",
    "sync_client",
    "sync_db",
    "unused_names",
    "wait_until_reachable",
    "within",
]
