"""Real peers of the recruiter in ``bin/bench``: other MongoDB-backed job queues on the same server.

:mod:`bench.peers.agenda` runs Agenda (Node.js, from the npm registry) at the
recruiter's worker counts; :mod:`bench.peers.celery_peer` runs Celery on kombu's
MongoDB transport (from PyPI, extra ``bench``) with one solo worker, a short queue
and a long one; :mod:`bench.peers.kill` SIGKILLs one of two workers of the recruiter
and of Agenda mid-run and counts the jobs run twice or lost; :mod:`bench.peers.table`
prints them side by side.
"""
