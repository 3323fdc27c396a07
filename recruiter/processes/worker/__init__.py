"""The worker process: its runtime (slots and timers), its roster entry, its executor and heartbeat."""
