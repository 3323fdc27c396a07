"""Example jobs for recruiter, as an application would write them.

- :mod:`examples.invoices` -- billing jobs (group ``billing``): a flaky payment
  gateway retried with exponential backoff, and a job that fails for a reason no
  retry can fix, archived at once by a :class:`~recruiter.retry.RetriableExceptionFilter`.
- :mod:`examples.reports` -- an ``async def execute`` job (group ``reports``).
- :mod:`examples.enqueue` -- a producer script: ``python -m examples.enqueue --target URI --count N``.
- :mod:`examples.demo` -- starts a whole installation and runs the jobs above (``bin/demo``).

Workers import these classes by name (``examples.invoices:SendInvoice``), so
start them from the repository root, or pass ``--import-path``.
"""
