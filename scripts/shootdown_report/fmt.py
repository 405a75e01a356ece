# SPDX-License-Identifier: MIT
"""Times, rates and ratios as the reports print them, and text tables."""
import re
import statistics

# A cell whose repetitions spread more than this (half their range over
# their median) is noise, in the text tables and the plots alike.
NOISY_SPREAD = 0.20


def fmt_time(ns):
    """Three significant digits in the largest unit that fits: 88.3 ns, 6.56 us."""
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return "%.3g %s" % (ns / scale, unit)
    return "%.3g ns" % ns


def fmt_ns(ns):
    """Two decimals, ns below 10 us (bench-ratios' columns of absolute times)."""
    if ns is None:
        return "-"
    if ns >= 1e6:
        return "%.2f ms" % (ns / 1e6)
    if ns >= 1e4:
        return "%.2f us" % (ns / 1e3)
    return "%.2f ns" % ns


def fmt_rate(v, per="/s"):
    """A rate as the patches quote loops/s: 527k, 1.16M (then @per)."""
    if v is None:
        return "-"
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return "%.3g%s%s" % (v / scale, unit, per)
    return "%.3g%s" % (v, per)


def fmt_x(x, whole_from=100):
    """A ratio: 1.52x; from @whole_from on without decimals (None: never)."""
    if x is None:
        return "-"
    if whole_from is not None and x >= whole_from:
        return "%.0fx" % x
    return "%.2fx" % x


def noisy(values):
    """Whether repetitions @values spread more than NOISY_SPREAD; fewer than
    3 say too little about their spread to call it noise."""
    if len(values) < 3:
        return False
    mid = statistics.median(values)
    return mid > 0 and (max(values) - min(values)) / 2 / mid > NOISY_SPREAD


def number(cell):
    """The number a formatted cell shows (1.52x, 527k/s, 99.5%, >= 90%), or
    None ("-"): modelled.json keeps its rows as the table prints them."""
    m = re.search(r"(\d+(?:\.\d+)?)([kM]?)", cell)
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6}[m.group(2)] if m else None


def table(rows, header, indent="  ", left=1):
    """Lines of a text table: the first @left columns left-aligned, the rest
    right-aligned, every column as wide as its widest cell."""
    rows = [[str(v) for v in r] for r in [header] + rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return [indent + "  ".join(v.ljust(w) if i < left else v.rjust(w)
                               for i, (v, w) in enumerate(zip(r, widths)))
            for r in rows]


def fig_value(text):
    """A row's figure as a number: '1.06x' 1.06, '329k/s' 329000, '81.7%' 81.7."""
    m = re.match(r"^(>= )?([0-9.]+)\s*([kM]?)", text or "")
    if not m:
        return None
    return float(m.group(2)) * {"": 1, "k": 1e3, "M": 1e6}[m.group(3)]
