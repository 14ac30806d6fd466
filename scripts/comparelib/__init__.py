"""scripts/comparelib - the modules of scripts/compare, one job each:

  common.py         the source root, say() and die()
  runner.py         one run of a command: spawn, sample RSS/PSS, reap, figures
  redis_client.py   a tiny RESP client (standard library only)
  redis_workload.py the redis workloads: start redis-server, fill, delete, read INFO
  workloads.py      the bundled workload suite and its groups
  allocators.py     which allocators exist and where their libraries are
  tables.py         medians, the per-workload tables, summary.csv, the speed line
  plots.py          RSS-over-time plots with gnuplot

scripts/compare is the entry point (command line and the run loop).
"""
