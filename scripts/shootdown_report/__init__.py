# SPDX-License-Identifier: MIT
"""Report tooling for shootdown-bench's Google Benchmark JSON.

The entry points scripts/compare, scripts/bench-ratios and scripts/plot are
thin wrappers around compare.py, ratios.py and plot.py here. What they share
is written once: benchmark names (names.py), starting the bench (runner.py),
loading results and taking medians (results.py), formatting and tables
(fmt.py), and the figures the kernel patches published (reference.py,
reading reference.json).
"""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BENCH = os.path.join(ROOT, "build", "bench", "shootdown-bench")


def load_values():
    """The host's load average (1, 5, 15 min) as numbers, or None where
    /proc has none: the package's one reading of it."""
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


def loadavg():
    """load_values() as the reports print it ("0.52 0.61 0.70"), "?" where
    there is none."""
    v = load_values()
    return " ".join("%.2f" % x for x in v) if v else "?"
