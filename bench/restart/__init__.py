"""bench/restart: read stalls while a mount daemon restarts or is upgraded (restart_stall.py)."""
