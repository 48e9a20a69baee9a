"""`make bench`: run every benchmark in this folder, each against a peer in the same run."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = ["bulk_push.py", "throughput.py", "tasks.py"]

for name in BENCHES:
    print(f"== {name}", flush=True)
    subprocess.run([sys.executable, os.path.join(HERE, name)], check=True)
