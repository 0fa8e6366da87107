"""Granary's benchmark drivers, one folder each; bench.benchlib holds what they share.

Every driver runs by path (`python3 bench/compare/compare.py ...`) or as a
module from the repository root (`python3 -m bench.compare.compare ...`);
bench/README.md says which driver answers which question.
"""
