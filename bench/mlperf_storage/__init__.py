"""bench/mlperf_storage: MLPerf Storage training workloads over each access path (mlperf_storage.py)."""
