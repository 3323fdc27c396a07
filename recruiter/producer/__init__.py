"""The producer API: :class:`Recruiter` (sync) and :class:`AsyncRecruiter` (asyncio), and
the job handles their ``enqueue`` returns (:mod:`recruiter.producer.handles`, waiting in
:mod:`recruiter.producer.waiting`)."""

from recruiter.producer.client import AsyncRecruiter, Recruiter

__all__ = ["AsyncRecruiter", "Recruiter"]
