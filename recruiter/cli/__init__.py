"""The command line: click commands and nothing else (``recruiter``, ``worker``, ``cleaner``)."""

from recruiter.cli.main import cleaner_main, main, recruiter_main, worker_main

__all__ = ["cleaner_main", "main", "recruiter_main", "worker_main"]
