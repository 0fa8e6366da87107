"""bench/write: checkpoint writes through Granary and the tools users run today (write_bench.py)."""
