"""The producer API: :class:`Recruiter` (sync) and :class:`AsyncRecruiter` (asyncio)."""

from recruiter.producer.client import AsyncRecruiter, Recruiter

__all__ = ["AsyncRecruiter", "Recruiter"]
