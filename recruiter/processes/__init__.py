"""The three long-running processes (recruiter, worker, cleaner) and what runs them.

A process owns a loop, its timers and its signals; it reads and writes only
through :mod:`recruiter.store` and decides only through :mod:`recruiter.domain`.
"""
