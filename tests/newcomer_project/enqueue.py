# enqueue.py: every example of every *jobs.py module here, enqueued, and its result checked.
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from recruiter import Recruiter


def main() -> int:
    here = Path(__file__).parent
    checked = 0
    with Recruiter.connect() as rec:
        for path in sorted(here.glob("*jobs.py")):
            module = importlib.import_module(path.stem)
            for enqueue, expected in module.EXAMPLES:
                result = enqueue(rec).wait(timeout=120)
                if result != expected:
                    print(f"{path.name}: {enqueue.__name__} gave {result!r}, not {expected!r}")
                    return 1
                checked += 1
    print(f"{checked} results as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
