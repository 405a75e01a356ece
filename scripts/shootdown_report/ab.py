# SPDX-License-Identifier: MIT
"""Two shootdown-bench binaries, alternately, in one sitting: the ratio of
their medians per benchmark (scripts/bench-ab)."""
import argparse
import re
import sys

from . import fmt, names, results, runner

# What a change to the library is re-measured on: the hit path, and one
# flush per strategy. Each entry is (old spellings..., new name): the LRU
# lock left the strategy spec for a name element of its own; the old side
# takes whichever spelling its binary knows.
DEFAULT = [
    ("tlb_lookup/sd_access/cpus:1",) * 2,
    ("flush_page/broadcast/cpus:2/remote:idle",) * 2,
    ("flush_page/broadcast/cpus:2/remote:busy",) * 2,
    ("flush_page/ipi/cpus:2/remote:idle",) * 2,
    ("flush_page/ipi/cpus:2/remote:busy",) * 2,
    ("mprotect_threaded/local/cpus:2",) * 2,
    ("tlb_flush2_threads/gbcast:lru=percpu/cpus:2", "tlb_flush2_threads/gbcast/lru:percpu/cpus:2"),
]
RATE = "loops_per_s"


def run(binary, wanted, min_time):
    """name -> (value, is_rate) for one run of @binary over @wanted."""
    filt = "^(" + "|".join(re.escape(n) for n in wanted) + ")(/real_time|/manual_time)?$"
    got = {}
    for name, r in runner.run(runner.command(binary, filt, min_time=min_time),
                              check=True).res.items():
        rate = results.med(r, RATE)
        got[names.base_name(name)] = (rate, True) if rate is not None else (results.med(r), False)
    return got


def measure(old, new, pairs, rounds, min_time):
    """{(old, new): ([old values], [new values], is_rate)}, OLD then NEW each round."""
    seen = {p: ([], [], False) for p in pairs}
    for _ in range(rounds):
        # The old binary may know a benchmark by any of its spellings,
        # the newest included (an OLD built after a rename).
        a = run(old, [n for p in pairs for n in p], min_time)
        b = run(new, [p[-1] for p in pairs], min_time)
        for p in pairs:
            old_name = next((n for n in p if n in a), None)
            if old_name and p[-1] in b:
                seen[p][0].append(a[old_name][0])
                seen[p][1].append(b[p[-1]][0])
                seen[p] = (seen[p][0], seen[p][1], b[p[-1]][1])
    return seen


def report(seen, out):
    rows = []
    for p, (a, b, rate) in seen.items():
        if not a or not b:
            rows.append([p[-1], "-", "-", "no result"])
            continue
        ma, mb = results.median(a), results.median(b)
        show = fmt.fmt_rate if rate else fmt.fmt_time
        rows.append([p[-1], show(ma), show(mb),
                     "%.3f%s" % (mb / ma, " (rate: higher is better)" if rate else "")])
    out.write("\n".join(fmt.table(rows, ["benchmark", "before", "after", "after / before"])) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench-ab", description=__doc__)
    ap.add_argument("old", help="the shootdown-bench before the change")
    ap.add_argument("new", help="the shootdown-bench after it")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--min-time", type=float, default=0.3)
    args = ap.parse_args(argv)
    seen = measure(args.old, args.new, DEFAULT, args.rounds, args.min_time)
    report(seen, sys.stdout)
    return 0 if all(a and b for a, b, _ in seen.values()) else 1
