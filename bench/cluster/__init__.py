"""bench/cluster: N independent caches against one Granary cluster (cluster_bench.py)."""
