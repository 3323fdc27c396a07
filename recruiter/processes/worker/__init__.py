"""The worker process, in parts: the process and its timers (``runtime``), the loop each
slot runs (``slots``), a slot's roster entry (``entry``), the executor (``executor``: job
in, outcome out, no writes), a running job's state (``state``), how slots hear of work
(``inbox``), the heartbeat thread (``heartbeat``), the child process that runs a job
with a timeout (``child``), the memory-limit supervisor (``supervisor``) and the
configuration (``config``)."""
