# SPDX-License-Identifier: MIT
"""scripts/plot: PNG plots from shootdown-bench JSON (usage in that file)."""
import argparse
import os
import sys

from . import names, reference
from .results import load, med

RATE_WORKLOADS = {"tlb_flush2_threads": "loops_per_s", "tlb_flush2_processes": "loops_per_s"}
YLABEL = {
    "mprotect_threaded": "time per mprotect per CPU",
    "process_churn": "time per short-lived mm per CPU",
    "context_switch": "time per context switch per CPU",
    "forked_worker": "time per migration + flush",
    "tlb_flush2_threads": "loops per second, all threads",
    "trap_dispatch": "wall time of 10^6 reads per thread",
}
TRAP_MODES = ("locked", "rcu", "direct")
RANGE_ORDERS = ("none", "ascending", "descending")

# One colour per strategy in every plot, so a reader who learnt it in one
# knows it in all: the exact variant first, then its strategy family (the
# spec before ':' and '/'), then a stable pick from the rest of a palette.
COLOURS = {
    "broadcast": "tab:blue", "local": "tab:orange", "ipi": "tab:green",
    "ipi:cpumask=eager": "tab:green", "ipi:cpumask=lazy": "tab:olive", "gbcast": "tab:red",
    "native": "black", "native:mode=processes": "black", "native:mode=threads": "dimgray",
    "native:mode=cpuid": "black",
    "locked": "tab:purple", "rcu": "tab:brown", "direct": "tab:pink",
    "none": "tab:gray", "ascending": "tab:cyan", "descending": "tab:blue",
}
SPARE = ("tab:cyan", "gold", "navy", "teal", "maroon", "darkkhaki")

# What "better" is on each kind of axis.
LOWER, HIGHER = " (lower is better)", " (higher is better)"
# A title's extra note (plot --note, e.g. the profile of a modelled run).
NOTE = {"text": ""}


def colour_of(variant):
    if variant in COLOURS:
        return COLOURS[variant]
    family = variant.split("/")[0]
    if family in COLOURS:
        return COLOURS[family]
    family = family.split(":")[0]
    if family in COLOURS:
        return COLOURS[family]
    return SPARE[sum(map(ord, variant)) % len(SPARE)]


def titled(text, sep="; "):
    return text + (sep + NOTE["text"] if NOTE["text"] else "")


def scaling_point(name):
    """(workload, variant, n) of a name that is only a count after its
    variant (cpus:N or threads:N, an lru:... before it), else None."""
    p = names.parse(name)
    key, n = p.count()
    if key is None or set(p.params) - {key, "lru"}:
        return None
    return p.workload, p.variant, n


def spread_of(r, key=None):
    """(min, max) of a result's repetitions (real time, or counter @key)."""
    vals = [v for v in (r["counters"].get(key, []) if key else r["real_ns"]) if v]
    return (min(vals), max(vals)) if vals else (None, None)


def series(res):
    """workload -> variant -> [(n, median, oversubscribed, min, max)] sorted
    by n; min and max over the repetitions."""
    by = {}
    for name, r in res.items():
        point = scaling_point(name)
        if not point or not r["real_ns"]:
            continue
        w, s, n = point
        v = med(r, RATE_WORKLOADS.get(w))
        if v is None:
            continue
        over = bool(med(r, "oversubscribed"))
        lo, hi = spread_of(r, RATE_WORKLOADS.get(w))
        by.setdefault(w, {}).setdefault(s, []).append((n, v, over, lo, hi))
    for w in by.values():
        for pts in w.values():
            pts.sort()
    return by


def time_axis(ax, values_ns):
    """Pick a unit for times given in ns; returns the divisor."""
    top = max(values_ns) if values_ns else 1
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0)):
        if top >= scale * 2 or unit == "ns":
            ax.set_ylabel(ax.get_ylabel() + " (%s)" % unit)
            return scale
    return 1.0


def mark_pus(ax, strategies):
    """Dashed line at the largest count that was not oversubscribed."""
    pinned = [n for pts in strategies.values() for n, _, over, *_ in pts if not over]
    if pinned:
        ax.axvline(max(pinned), color="grey", linestyle="--", linewidth=1)
        ax.text(max(pinned), ax.get_ylim()[1], " PUs: oversubscribed to the right →",
                va="top", ha="left", fontsize=8, color="grey")


def log_axes(ax, xlabel, ylabel):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def points(ax, pts, label, linestyle="-", spread=None):
    """A line through @pts [(x, y, hollow)] in @label's colour, each point
    a marker, hollow where oversubscribed; @spread [(lo, hi)] per point:
    error bars from the repetitions' range."""
    colour = colour_of(label)
    ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], linestyle=linestyle, label=label,
            color=colour)
    for i, (x, y, hollow) in enumerate(pts):
        ax.plot([x], [y], marker="o", markersize=6, color=colour,
                markerfacecolor="none" if hollow else colour)
        lo, hi = spread[i] if spread else (None, None)
        if lo is not None and hi is not None and hi > lo:
            ax.errorbar([x], [y], yerr=[[max(y - lo, 0)], [max(hi - y, 0)]], color=colour,
                        capsize=3, linewidth=1)


def save(plt, fig, out_dir, filename):
    fig.tight_layout()
    path = os.path.join(out_dir, filename)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_scaling(plt, w, strategies, out_dir):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    rate = w in RATE_WORKLOADS
    ax.set_ylabel(YLABEL.get(w, "time per operation"))
    all_v = [v for pts in strategies.values() for _, v, _, _, _ in pts]
    scale = 1.0 if rate else time_axis(ax, all_v)
    for s in sorted(strategies):
        pts = strategies[s]
        points(ax, [(n, v / scale, over) for n, v, over, _, _ in pts], s,
               ":" if s.startswith("native") else "-",
               [(lo / scale if lo else None, hi / scale if hi else None)
                for _, _, _, lo, hi in pts])
    log_axes(ax, "threads (emulated CPUs)" if w == "trap_dispatch" else "emulated CPUs",
             ax.get_ylabel() + (HIGHER if rate else LOWER))
    xs = sorted({n for pts in strategies.values() for n, _, _, _, _ in pts})
    ax.set_xticks(xs)
    ax.set_xticklabels([str(n) for n in xs])
    # Say only what is drawn: hollow points and dotted lines when there are.
    keys = (["hollow = oversubscribed"] if any(o for pts in strategies.values()
                                                for _, _, o, _, _ in pts) else []) + \
        (["dotted = native kernel"] if any(s.startswith("native") for s in strategies) else []) + \
        (["bars = range of the repetitions"] if any(lo is not None and hi is not None and hi > lo
                                                    for pts in strategies.values()
                                                    for _, _, _, lo, hi in pts) else [])
    ax.set_title(titled("%s: scaling by strategy%s" % (w, " (%s)" % "; ".join(keys) if keys
                                                       else "")), fontsize=9)
    mark_pus(ax, strategies)
    ax.legend(fontsize=8, loc="best")
    return save(plt, fig, out_dir, "scaling-%s.png" % w)


def trap_points(res):
    """mode -> [(threads, wall ns, summed CPU s, oversubscribed, (min, max)
    wall ns)] sorted."""
    modes = {}
    for name, r in res.items():
        p = names.parse(name)
        if p.workload != "trap_dispatch" or p.strategy not in TRAP_MODES or not r["real_ns"]:
            continue
        modes.setdefault(p.strategy, []).append(
            (p.count()[1], med(r), med(r, "cpu_s"), bool(med(r, "oversubscribed")),
             spread_of(r)))
    return {m: sorted(pts) for m, pts in modes.items()}


def plot_trap(plt, res, out_dir):
    modes = trap_points(res)
    if not modes:
        return None
    # CPU time is the host's: a modelled run has none, and gets one panel.
    has_cpu = any(cpu is not None for pts in modes.values() for _, _, cpu, _, _ in pts)
    fig, axes = plt.subplots(1, 2 if has_cpu else 1, figsize=(10 if has_cpu else 6.5, 4.8))
    a1, a2 = (axes[0], axes[1]) if has_cpu else (axes, None)
    for mode in TRAP_MODES:
        pts = modes.get(mode, [])
        points(a1, [(t, wall / 1e6, over) for t, wall, _, over, _ in pts], mode,
               spread=[(lo / 1e6 if lo else None, hi / 1e6 if hi else None)
                       for _, _, _, _, (lo, hi) in pts])
        if a2 is not None:
            points(a2, [(t, cpu * 1e3, over) for t, _, cpu, over, _ in pts if cpu is not None],
                   mode)
    panels = [(a1, "wall time, ms" + LOWER, "the patch's real")]
    if a2 is not None:
        panels.append((a2, "summed thread CPU time, ms" + LOWER, "the patch's sys"))
    for ax, what, title in panels:
        log_axes(ax, "threads (hollow = oversubscribed)", what)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(titled("arm64 EL0 MRS emulation rework: trap dispatch,\n10^6 ID-register "
                        "reads per thread", " (") + (")" if NOTE["text"] else ""), fontsize=10)
    return save(plt, fig, out_dir, "trap_dispatch.png")


def range_points(res):
    """order -> [(pages, TLBI ops, whole-ASID ops)] sorted, as measured."""
    orders = {}
    for name, r in res.items():
        p = names.parse(name)
        order = p.options.get("range")
        if p.workload != "range_flush" or order is None or med(r, "tlbi_ops") is None:
            continue
        orders.setdefault(order, []).append(
            (int(p.params["pages"]), med(r, "tlbi_ops"), med(r, "asid_ops") or 0))
    return {o: sorted(pts) for o, pts in orders.items()}


def plot_range(plt, res, out_dir):
    orders = range_points(res)
    if not orders:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    # The two range orders give the same counts except at 2^21 pages: draw
    # them in distinct shapes, ascending slightly larger and hollow.
    styles = {"none": (":", "o", 6, True), "ascending": ("--", "s", 9, False),
              "descending": ("-", "o", 5, True)}
    for order in RANGE_ORDERS:
        pts = orders.get(order, [])
        if not pts:
            continue
        ls, mk, size, filled = styles[order]
        line, = ax.plot([p for p, _, _ in pts], [o for _, o, _ in pts], linestyle=ls, marker=mk,
                        markersize=size, markerfacecolor=None if filled else "none",
                        label="range=%s" % order, color=colour_of(order))
        asid = [(p, o) for p, o, a in pts if a]
        if asid:
            ax.plot([p for p, _ in asid], [o for _, o in asid], linestyle="none", marker="x",
                    markersize=11, color=line.get_color())
    if any(a for pts in orders.values() for _, _, a in pts):
        ax.plot([], [], linestyle="none", marker="x", color="black",
                label="whole-ASID flush instead of ranges")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("pages flushed (4 KiB)")
    ax.set_ylabel("TLBI operations per flush (broadcasts)" + LOWER)
    ax.set_title(titled("arm64 range TLBI decomposition: operations by flush size"), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(plt, fig, out_dir, "range_ops.png")


# The modelled section's two colours, the same in both panels.
OURS, PATCH = "tab:blue", "tab:orange"


def modelled_ratios(res, top, bottom, key, counts):
    """[(n, model_ns(top) / model_ns(bottom))] at the counts both ran."""
    out = []
    for n in counts:
        a = med(res.get(top % (key, n)), "model_ns")
        b = med(res.get(bottom % (key, n)), "model_ns")
        if a and b:
            out.append((n, a / b))
    return out


def plot_modelled(plt, out_dir):
    """modelled.png: each patch's speedup in modelled time on its machine's
    profile against the patch's own figures (compare's modelled section,
    modelled-<patch>.json beside the comparison's JSON); None if absent."""
    paths = {k: os.path.join(out_dir, "modelled-%s.json" % k) for k in ("mrs", "skip_broadcast")}
    if not all(os.path.exists(p) for p in paths.values()):
        return None
    ref = reference.load()
    mrs, skip = load(paths["mrs"])[1], load(paths["skip_broadcast"])[1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    trap = reference.by_count(ref["trap_dispatch"])
    ours = modelled_ratios(mrs, "trap_dispatch/locked/%s:%d", "trap_dispatch/direct/%s:%d",
                           "threads", (1, 2, 4, 8, 16, 32, 64))
    theirs = [(n, v[0] / v[2]) for n, v in sorted(trap.items())]
    for ax, pts, title, xlabel, fig_pts in (
            (left, ours, "arm64 MRS emulation, thunderx2-64-vm", "threads", theirs),
            (right, modelled_ratios(skip, "mprotect_threaded/broadcast/%s:%d",
                                    "mprotect_threaded/local/%s:%d", "cpus",
                                    (1, 2, 4, 8, 16, 32)),
             "arm64 skip TLBI broadcast, ampere-emag-32", "CPUs",
             [(int(n), v[0] / v[1]) for n, v in ref["mprotect_threaded"]["cpus"].items()])):
        log_axes(ax, xlabel, "speedup, before / after (higher is better for the patch)")
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], "-o", color=OURS,
                    label="modelled here")
        ax.plot([x for x, _ in fig_pts], [y for _, y in fig_pts], "--s", color=PATCH,
                markerfacecolor="none", label="the patch's figure")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    return save(plt, fig, out_dir, "modelled.png")


def import_pyplot():
    """matplotlib.pyplot, or None when it is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        pass
    # Another python3 first in PATH (pyenv, a venv): Debian's own has
    # python3-matplotlib.
    system = "/usr/bin/python3"
    if (os.path.exists(system) and not os.environ.get("SD_PLOT_SYSTEM_PYTHON")
            and os.path.realpath(sys.executable) != os.path.realpath(system)):
        os.environ["SD_PLOT_SYSTEM_PYTHON"] = "1"
        os.execv(system, [system] + sys.argv)
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description="plot shootdown-bench JSON")
    ap.add_argument("json")
    ap.add_argument("--out", default=None)
    ap.add_argument("--note", default="", help="added to every title (e.g. a modelled run's profile)")
    args = ap.parse_args(argv)
    NOTE["text"] = args.note
    plt = import_pyplot()
    if plt is None:
        print("plot: matplotlib is not installed (Debian: apt-get install python3-matplotlib); "
              "no plots drawn")
        return 3
    out_dir = args.out or os.path.dirname(os.path.abspath(args.json))
    os.makedirs(out_dir, exist_ok=True)
    _, res = load(args.json)
    made = []
    for w, strategies in sorted(series(res).items()):
        if w == "trap_dispatch" or len({p[0] for pts in strategies.values() for p in pts}) < 2:
            continue
        made.append(plot_scaling(plt, w, strategies, out_dir))
    made += [p for p in (plot_trap(plt, res, out_dir), plot_range(plt, res, out_dir),
                         plot_modelled(plt, out_dir)) if p]
    for p in made:
        print("plot: wrote %s" % p)
    return 0 if made else 1
