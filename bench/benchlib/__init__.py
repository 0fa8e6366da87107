"""What the benchmark drivers under bench/ share.

  procs    starting and stopping processes by pid (Procs), StepError, ports, HTTP
  cpu      CPU seconds from /proc: per process tree, per machine (CpuMeter)
  mounts   mountinfo, unmounting, `granary mount` of a bucket (GranaryMount) or
           of a directory (DirMounts), scratch and cache directories
  origin   the S3-compatible origin (s3rver or moto_server), its environment,
           the delay proxy's command line, origin/client CPU pinning
  bench    Bench: an origin behind the delay proxy, an ImageNet-like data set
           on it, and one measured bench/reader epoch
  results  results.json / results.md, --check, the machine and tool versions
  netns    several hosts on one machine (network namespaces on a bridge) and
           a Granary cluster's flags and metrics across them
  granary_module  Granary's Python module from the source and build trees

Drivers are modules of the `bench` package: `python3 -m bench.compare.compare`
from the repository root. Run by path (`python3 bench/compare/compare.py`), a
driver's opening lines run it again that way, with the repository root on
PYTHONPATH, so that nothing edits sys.path. A driver imports this package and
its own folder's modules, never another driver.
"""
