"""bench/large_read: large-object streaming reads (large_read.py)."""
