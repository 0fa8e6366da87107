"""bench/python: Python reading through open(), Granary's API and DataLoader (pybench.py)."""
