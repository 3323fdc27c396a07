"""The retry policies, where users import them: ``from recruiter.retry import ExponentialBackoff``.

They are defined in :mod:`recruiter.domain.retry`; jobs store them as
``recruiter.retry:<Name>`` (see ``recruiter.domain.naming.STABLE_MODULES``).
"""

from recruiter.domain.retry import *  # noqa: F403
from recruiter.domain.retry import __all__ as __all__
