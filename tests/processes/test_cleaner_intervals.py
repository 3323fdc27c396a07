"""The cleaner judges ``--considered-dead-after`` by the intervals workers registered (issue 21, item 7).

``cleaner start --considered-dead-after 6s`` used to refuse to start unless also given
``--heartbeat-interval 1s``, though the workers beat every second and said so in the
roster. Now, without ``--heartbeat-interval``, it checks the registered intervals, and it
judges each worker by at least twice its own: a SIGKILLed worker beating every second is
removed, a live one never, not even one that registered later beating every 5 s.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime
from typing import Any

from tests.conftest import wait_for
from tests.processes.conftest import Processes


def test_a_safe_setting_is_accepted_and_no_live_worker_is_taken_for_dead(processes: Processes, db: Any) -> None:
    quick = ["--poll-from", "10ms", "--poll-to", "100ms"]
    doomed = processes.start("worker", "worker", "start", "--id", "doomed", "--heartbeat-interval", "1s", *quick)
    processes.start("worker", "worker", "start", "--id", "alive", "--heartbeat-interval", "1s", *quick)
    # 2 lanes each, named by their process's heartbeat document.
    wait_for(lambda: sum(len(b["ids"]) for b in db.heartbeats.find()) >= 4, message="both workers registered")
    cleaner = processes.start("cleaner", "cleaner", "start", "--considered-dead-after", "6s", "--interval", "200ms",
                              "--lease-ttl", "2s")
    wait_for(lambda: db.metadata.find_one({"_id": "cleaner"}), timeout_s=20, message="the cleaner leading")
    # Registered after the cleaner started, beating every 5 s: dead only after 10 s of silence, not 6 s.
    processes.start("worker", "worker", "start", "--id", "slow", "--heartbeat-interval", "5s", *quick)
    wait_for(lambda: db.roster.find_one({"_id": "slow"}), message="the slow worker registered")

    doomed.signal(signal.SIGKILL)
    # Silence counts from its last beat, not the kill: on a loaded machine that beat may be seconds before it.
    last = db.heartbeats.find_one({"ids": "doomed"})["last_seen_at"]
    wait_for(lambda: db.roster.find_one({"_id": "doomed"}) is None, timeout_s=30, message="the dead worker removed")
    silent_s = (datetime.now(UTC) - last).total_seconds()
    assert silent_s >= 5.7, silent_s  # not before its 6 s of silence (a little slack for the processes' clocks)
    watch_until = time.monotonic() + 12
    while time.monotonic() < watch_until:
        assert db.roster.find_one({"_id": "alive"}) is not None, "a live worker was taken for dead"
        assert db.roster.find_one({"_id": "slow"}) is not None, "a live slow-beating worker was taken for dead"
        time.sleep(0.2)
    assert cleaner.popen.poll() is None
