"""Benchmarks: the central recruiter against the seed's v1 design, on one server, in one run.

``bin/bench`` (``python -m bench.run``) is the entry point; see :mod:`bench.run`.
"""
