"""One of the producers of the unique-key storm (``test_unique_and_resubmit_processes``).

``python -m tests.processes.unique_storm <uri> <name> <times>``: connects, says it is
ready in the ledger, waits for the test's ``go``, then enqueues the storm's two unique
jobs ``times`` times each, as fast as it can, and prints what each enqueue returned
(one JSON line: ``[[key, job id, existed], ...]``).
"""

from __future__ import annotations

import json
import sys
import time

from recruiter import Recruiter
from tests.workables import Record, WaitForRelease, ledger

UNFINISHED_KEY = "storm-while-unfinished"
FOREVER_KEY = "storm-forever"


def main(uri: str, name: str, times: int) -> None:
    with Recruiter.connect(uri) as rec:
        ledger(uri).insert_one({"event": "storm-ready", "name": name})
        while ledger(uri).find_one({"event": "storm-go"}) is None:
            time.sleep(0.01)
        seen = []
        for _ in range(times):
            held = WaitForRelease(uri, "storm").as_job_of(rec).unique(UNFINISHED_KEY).enqueue()
            once = Record(uri, n=1).as_job_of(rec).unique(FOREVER_KEY, scope="forever").enqueue()
            seen += [[UNFINISHED_KEY, str(held), held.existed], [FOREVER_KEY, str(once), once.existed]]
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
