# SPDX-License-Identifier: MIT
"""Report tooling for shootdown-bench's Google Benchmark JSON.

The entry points scripts/compare, scripts/bench-ratios and scripts/plot are
thin wrappers around compare.py, ratios.py and plot.py here. What they share
is written once: benchmark names (names.py), loading results and taking
medians (results.py), formatting and tables (fmt.py), and the figures the
kernel patches published (reference.py, reading reference.json).
"""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BENCH = os.path.join(ROOT, "build", "bench", "shootdown-bench")


def loadavg():
    """The host's load average (1, 5, 15 min), for reports that say how
    loaded the machine was; "?" where /proc has none."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"
