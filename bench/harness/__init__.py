"""The multi-peer benchmark behind `make bench` / `make bench-quick` (entry point: bench/run.py).

Modules, in the order a run uses them:
  rows      the configurations measured (one table row each) and the run's settings
  install   each peer's virtualenv (bench/.venvs/<peer>), Ruby Sidekiq, library versions
  peers     driving a peer's command line (bench/peers/<peer>_peer.py, contract in _peer.py)
  tree      a worker's process tree: CPU time, RSS, idleness, stopping it with nothing left
  redisops  the harness's own Redis commands (counted), INFO commandstats, redis-benchmark
  cluster   the private 3-primary Redis Cluster of the Cluster rows, and redisops over it
  baseline  --baseline REF: a git worktree of an older sidequest, whose rows import it first
  phases    one configuration's measurements in one round
  ackwindow (a phase of sidequest rows) how long finished jobs stay in Redis before acknowledged
  rounds    interleaved rounds, medians, ratios to Sidekiq of the same round
  report    the terminal tables (their text shared with markdown) and the JSON file
  chart     the PNG/SVG chart of the key figures
  markdown  the tables as markdown: bench/results/latest.md, docs/performance.md
"""

import importlib.util

if importlib.util.find_spec("psutil") is None:
    raise SystemExit("the benchmark needs its extra: .venv/bin/pip install -e '.[bench]'  (or: make bench)")
