"""bench/compare: Granary beside s3fs, rclone and local disk (compare.py), and the read modes over a data set larger than memory (over_memory.py)."""
