# SPDX-License-Identifier: MIT
"""scripts/plot: PNG plots from shootdown-bench JSON (usage in that file)."""
import argparse
import collections
import json
import os
import sys
import textwrap

from . import names, patches
from .fmt import NOISY_SPREAD, noisy, number
from .results import from_doc, med

RATE_WORKLOADS = {"tlb_flush2_threads": "loops_per_s", "tlb_flush2_processes": "loops_per_s"}
YLABEL = {
    "mprotect_threaded": "time per mprotect per CPU",
    "process_churn": "time per short-lived mm per CPU",
    "context_switch": "time per message (hackbench on tasks)",
    "forked_worker": "time per migration + flush (a hop)",
    "tlb_flush2_threads": "loops per second, all threads",
    "tlb_flush2_processes": "loops per second, all processes",
    "trap_dispatch": "wall time of 10^6 reads per thread",
}
TRAP_MODES = ("locked", "rcu", "direct")
RANGE_ORDERS = ("none", "ascending", "descending")

# One colour per strategy in every plot, so a reader who learnt it in one
# knows it in all; its options and LRU lock (ipi:cpumask=lazy, ipi/lru:global)
# keep the colour and change the line style and marker (styles()).
COLOURS = {
    "broadcast": "tab:blue", "local": "tab:orange", "ipi": "tab:green", "gbcast": "tab:red",
    "native": "black",
    "locked": "tab:purple", "rcu": "tab:brown", "direct": "tab:pink",
    "none": "tab:gray", "ascending": "tab:cyan", "descending": "tab:blue",
}
SPARE = ("tab:cyan", "gold", "navy", "teal", "maroon", "darkkhaki")
# Line styles and markers of different lengths: two options differ in both.
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")

# What "better" is on each kind of axis.
LOWER, HIGHER = " (lower is better)", " (higher is better)"
NOISE = "hollow: repetitions spread > %.0f%% (noise)" % (100 * NOISY_SPREAD)
STAMP_SIZE = 11

# Where the figures go and what every one of them says: the title's note
# (plot --note, e.g. the profile of a modelled run) and a disturbed run's stamp.
Out = collections.namedtuple("Out", "plt dir note stamp", defaults=("", ""))
# A measured point: its CPU or thread count, the median of its repetitions,
# whether it ran oversubscribed, their range (None without values), noise.
Point = collections.namedtuple("Point", "n v over lo hi noisy")


def kind(variant):
    """A plot line's strategy without options or LRU lock (ipi for
    ipi:cpumask=lazy/lru:global)."""
    return variant.split("/")[0].split(":")[0]


def options_of(variant):
    """What tells apart the lines of one strategy: "cpumask=lazy",
    "lru:global", "threshold=0/lru:percpu"; "" for none."""
    return variant[len(kind(variant)):].lstrip(":/")


def colour_of(variant):
    k = kind(variant)
    return COLOURS.get(k) or SPARE[sum(map(ord, k)) % len(SPARE)]


def styles(variants):
    """variant -> (line style, marker), one pair per distinct options among
    @variants: two lines of one colour differ in both, and the same options
    look the same in every strategy of the plot (lru:percpu for ipi and
    gbcast alike)."""
    opts = sorted({options_of(v) for v in variants})
    rank = {v: opts.index(options_of(v)) for v in variants}
    return {v: (LINESTYLES[i % len(LINESTYLES)], MARKERS[i % len(MARKERS)])
            for v, i in rank.items()}


def scaling_point(name):
    """(workload, variant, n) of a name that is only a count after its
    variant (cpus:N or threads:N, an lru:... before it), else None."""
    p = names.parse(name)
    key, n = p.count()
    if key is None or set(p.params) - {key, "lru"}:
        return None
    return p.workload, p.variant, n


def point(n, r, counter=None):
    """The Point of result @r at count @n, from its repetitions' real time
    (or @counter); None without a median."""
    v = med(r, counter)
    if v is None:
        return None
    vals = [x for x in (r["counters"].get(counter, []) if counter else r["real_ns"]) if x]
    return Point(n, v, bool(med(r, "oversubscribed")), min(vals, default=None),
                 max(vals, default=None), noisy(vals))


def scaled(p, divisor):
    return p._replace(v=p.v / divisor, lo=p.lo and p.lo / divisor, hi=p.hi and p.hi / divisor)


def series(res):
    """workload -> variant -> [Point] sorted by count."""
    by = {}
    for name, r in res.items():
        where = scaling_point(name)
        if not where or not r["real_ns"]:
            continue
        w, s, n = where
        p = point(n, r, RATE_WORKLOADS.get(w))
        if p:
            by.setdefault(w, {}).setdefault(s, []).append(p)
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


def mark_pus(ax, pts):
    """Dashed line at the largest count that was not oversubscribed, said
    in the legend (a text in the axes may hide under it)."""
    pinned = [p.n for p in pts if not p.over]
    if pinned:
        ax.axvline(max(pinned), color="grey", linestyle="--", linewidth=1,
                   label="the PUs: oversubscribed to the right")


def log_axes(ax, xlabel, ylabel, pts):
    """Log axes, the counts of @pts [Point] ticked as numbers (8, not 2^3)."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    xs = sorted({p.n for p in pts})
    ax.set_xticks(xs, [str(n) for n in xs])


def has_bars(pts):
    return any(p.lo is not None and p.hi is not None and p.hi > p.lo for p in pts)


def draw_points(ax, pts, label, colour, style=("-", "o")):
    """@pts [Point] as one line in @colour and @style (line style, marker),
    so that the legend shows both; noisy points hollow, and bars over the
    range of the repetitions."""
    linestyle, marker = style
    ax.plot([p.n for p in pts], [p.v for p in pts], linestyle=linestyle, marker=marker,
            markersize=6, color=colour, label=label,
            markevery=[i for i, p in enumerate(pts) if not p.noisy])
    noise = [p for p in pts if p.noisy]
    if noise:
        ax.plot([p.n for p in noise], [p.v for p in noise], linestyle="none", marker=marker,
                markersize=6, color=colour, markerfacecolor="none")
    bars = [p for p in pts if has_bars([p])]
    if bars:
        ax.errorbar([p.n for p in bars], [p.v for p in bars], fmt="none", color=colour,
                    capsize=3, linewidth=1, yerr=[[max(p.v - p.lo, 0) for p in bars],
                                                  [max(p.hi - p.v, 0) for p in bars]])


def legend(ax, pts, **where):
    """The legend, with the key to hollow points when any is noise."""
    if any(p.noisy for p in pts):
        ax.plot([], [], linestyle="none", marker="o", color="grey", markerfacecolor="none",
                label=NOISE)
    ax.legend(fontsize=8, **where)


def wrap(text, fig, fontsize):
    """@text in lines as wide as @fig at @fontsize (a character of
    matplotlib's DejaVu Sans is at most ~0.6 of the font size wide)."""
    return textwrap.fill(text, int(0.95 * fig.get_figwidth() * 72 / (0.6 * fontsize)))


def title(out, fig, text, fontsize=10):
    """The figure's title and the run's note, wrapped: one line wider than
    the figure is cut off at its edges. A figure title, not an axes one,
    so that tight_layout leaves room for all its lines."""
    fig.suptitle(wrap(text + ("; " + out.note if out.note else ""), fig, fontsize),
                 fontsize=fontsize)


def subplots(out, *args, **kw):
    """A figure and its axes, stamped at the bottom when the run was disturbed."""
    fig, axes = out.plt.subplots(*args, **kw)
    if out.stamp:
        fig.text(0.5, 0.01, wrap(out.stamp, fig, STAMP_SIZE), ha="center", va="bottom",
                 color="red", fontsize=STAMP_SIZE, fontweight="bold",
                 bbox={"facecolor": "mistyrose", "edgecolor": "red"})
    return fig, axes


def layout(out, fig):
    """tight_layout, above the stamp's lines where there is one."""
    lines = wrap(out.stamp, fig, STAMP_SIZE).count("\n") + 1 if out.stamp else 0
    bottom = (lines * 1.3 * STAMP_SIZE + 12) / 72 / fig.get_figheight() if lines else 0
    fig.tight_layout(rect=(0, bottom, 1, 1))


def save(out, fig, filename):
    layout(out, fig)
    os.makedirs(out.dir, exist_ok=True)
    path = os.path.join(out.dir, filename)
    fig.savefig(path, dpi=110)
    out.plt.close(fig)
    return path


def scaling_figure(out, w, strategies):
    fig, ax = subplots(out, figsize=(9, 5))
    rate = w in RATE_WORKLOADS
    every = [p for pts in strategies.values() for p in pts]
    ax.set_ylabel(YLABEL.get(w, "time per operation"))
    scale = 1.0 if rate else time_axis(ax, [p.v for p in every])
    style = styles(strategies)
    for s in sorted(strategies):
        draw_points(ax, [scaled(p, scale) for p in strategies[s]], s, colour_of(s), style[s])
    log_axes(ax, "emulated CPUs", ax.get_ylabel() + (HIGHER if rate else LOWER), every)
    mark_pus(ax, every)
    # Outside the axes: a legend of many lines would hide some of them.
    legend(ax, every, loc="upper left", bbox_to_anchor=(1.01, 1))
    title(out, fig, "%s: scaling by strategy (colour: strategy; line and marker: its options "
          "and LRU lock%s)" % (w, "; bars: range of the repetitions" if has_bars(every) else ""))
    return fig


def trap_points(res):
    """mode -> ([Point] of wall time in ms, [Point] of summed thread CPU
    time in ms), by thread count."""
    modes = {}
    for name, r in res.items():
        p = names.parse(name)
        if p.workload != "trap_dispatch" or p.strategy not in TRAP_MODES or not r["real_ns"]:
            continue
        n = p.count()[1]
        wall, cpu = modes.setdefault(p.strategy, ([], []))
        wall.append(scaled(point(n, r), 1e6))
        cpu_s = point(n, r, "cpu_s")
        if cpu_s:
            cpu.append(scaled(cpu_s, 1e-3))
    return {m: (sorted(wall), sorted(cpu)) for m, (wall, cpu) in modes.items()}


def trap_figure(out, res):
    modes = trap_points(res)
    if not modes:
        return None
    # CPU time is the host's: a modelled run has none, and gets one panel.
    has_cpu = any(cpu for _, cpu in modes.values())
    fig, axes = subplots(out, 1, 2 if has_cpu else 1, figsize=(10 if has_cpu else 6.5, 4.8),
                         squeeze=False)
    panels = [("wall time, ms" + LOWER, "the patch's real"),
              ("summed thread CPU time, ms" + LOWER, "the patch's sys")][:len(axes[0])]
    for i, (ax, (what, name)) in enumerate(zip(axes[0], panels)):
        every = []
        for mode in TRAP_MODES:
            pts = modes.get(mode, ([], []))[i]
            if pts:
                draw_points(ax, pts, mode, colour_of(mode))
                every += pts
        log_axes(ax, "threads", what, every)
        mark_pus(ax, every)
        ax.set_title(name, fontsize=9)
        legend(ax, every)
    title(out, fig, patches.title("mrs") + ": trap dispatch, 10^6 ID-register reads "
          "per thread")
    return fig


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


def range_figure(out, res):
    orders = range_points(res)
    if not orders:
        return None
    fig, ax = subplots(out, figsize=(7.5, 4.8))
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
    title(out, fig, patches.title("range_tlbi") + ": operations by flush size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def figures(out, res):
    """(file name, figure) of every plot that results @res have points for."""
    made = [("scaling-%s.png" % w, scaling_figure(out, w, strategies))
            for w, strategies in sorted(series(res).items())
            if w != "trap_dispatch" and len({p.n for pts in strategies.values() for p in pts}) > 1]
    return made + [(name, fig) for name, fig in (("trap_dispatch.png", trap_figure(out, res)),
                                                 ("range_ops.png", range_figure(out, res))) if fig]


# modelled.png: the patch's figure, and a row's verdict ("within ...", "miss ...").
PATCH = "tab:orange"
VERDICT = {"within": "tab:green", "miss": "tab:red", "not": "tab:red"}


def read(path):
    """The JSON document at @path; exit 1, saying why, if it cannot be read."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("plot: cannot read %s: %s" % (path, e))


def load_modelled(directory):
    """The modelled section's table in @directory (modelled.json, as
    modelled.write_json() writes it), or None where there is none."""
    path = os.path.join(directory, "modelled.json")
    return read(path) if os.path.exists(path) else None


def ratio_axis(ax, lo, hi):
    """A log x axis from @lo to @hi, ticked at 1, 2 and 5 of each decade
    and read as ratios (0.5x, 1x, 20x), not powers of ten."""
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = [m * 10.0 ** e for e in range(-3, 4) for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
    ax.minorticks_off()
    ax.set_xticks(ticks, ["%gx" % t for t in ticks])


def modelled_figure(out, doc):
    """Every row of the modelled table: its modelled value over the patch's
    figure on a log axis (1: the figure itself), coloured by its verdict,
    with both values and the verdict written beside it."""
    rows, tol = doc["rows"], doc.get("tolerance", 0.3)
    fig, ax = subplots(out, figsize=(11, 1.8 + 0.5 * len(rows)))
    ax.axvspan(1 - tol, 1 + tol, color="tab:green", alpha=0.12,
               label="within ±%.0f%% of the patch's figure" % (100 * tol))
    ax.axvline(1, color=PATCH, linestyle="--", label="the patch's figure")
    dots, ratios = {}, [1 - tol, 1 + tol]
    for y, row in enumerate(rows):
        # 6 cells, or 7 with the half run's figure before the verdict.
        patch, theirs, ours, verdict = row[0], row[3], row[4], row[-1]
        mine, fig_value = number(ours), number(theirs)
        colour = VERDICT.get(verdict.split()[0], "grey")
        if mine and fig_value:
            ratios.append(mine / fig_value)
            ax.plot([1, ratios[-1]], [y, y], color=colour, linewidth=1.5, alpha=0.6)
            dots.setdefault(verdict.split()[0], []).append((ratios[-1], y))
        # A column of text right of the axes: the table's own cells.
        ax.annotate("patch's %s, modelled %s: %s" % (theirs, ours, verdict), xy=(1.02, y),
                    xycoords=("axes fraction", "data"), va="center", fontsize=8, color=colour)
        if y and rows[y - 1][0] != patch:
            ax.axhline(y - 0.5, color="lightgrey", linewidth=1)
    for v, pts in sorted(dots.items(), reverse=True):
        ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle="none", marker="o",
                markersize=8, color=VERDICT.get(v, "grey"), label="modelled: " + v)
    ratio_axis(ax, min(ratios) / 1.5, max(ratios) * 1.5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["%s: %s\n%s" % (r[0], r[2], r[1]) for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("modelled value / the patch's figure (log scale; 1x: the patch's figure exactly)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    # Above the axes: inside, it would hide a row's dot.
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4)
    title(out, fig, "Modelled time against the kernel patches' published figures: every row "
          "of compare's modelled table (each patch on a profile of its own machine, strict "
          "mode)")
    return fig


def invlpgb_threads_figure(out, doc):
    """The merged INVLPGB commit's loops/s by thread count, tip and INVLPGB:
    its published points, and the modelled curves on milan-36."""
    c = doc["invlpgb_threads"]
    fig, ax = subplots(out, figsize=(8, 5))
    for key, colour, label in (("tip", "tab:blue", "tip (IPIs)"),
                               ("invlpgb", "tab:red", "with INVLPGB")):
        ax.plot(c["threads"], c["published"][key], linestyle="none", marker="o",
                markersize=8, color=colour, label="published, 72-CPU Milan: " + label)
        pts = [(n, v) for n, v in zip(c["threads"], c["modelled"][key]) if v]
        if pts:
            ax.plot([n for n, _ in pts], [v for _, v in pts], marker="s", color=colour,
                    alpha=0.7, label="modelled, %s, strict: %s"
                    % (patches.profile("invlpgb_threads"), label))
    ax.set_xscale("log", base=2)
    ax.set_xticks(c["threads"], [str(n) for n in c["threads"]])
    ax.minorticks_off()
    ax.set_xlabel("threads (will-it-scale tlb_flush2_threads)")
    ax.set_ylabel("loops/s, all threads")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    title(out, fig, "INVLPGB by thread count: the merged commit's table against modelled time")
    return fig


def modelled_pngs(out, directory):
    """[path] of modelled.png (and invlpgb-threads.png when the section ran
    the curve) drawn from @directory's modelled.json, [] when there is none.
    Never stamped: modelled time does not depend on the host's load."""
    doc = load_modelled(directory)
    out = out._replace(stamp="")
    if not doc:
        return []
    made = [save(out, modelled_figure(out, doc), "modelled.png")]
    if any(v for vs in doc.get("invlpgb_threads", {}).get("modelled", {}).values() for v in vs):
        made.append(save(out, invlpgb_threads_figure(out, doc), "invlpgb-threads.png"))
    return made


def stamp_text(option, doc):
    """The warning on every plot of a disturbed run: --disturbed's @option,
    else the load verdict compare wrote into the JSON @doc; "" if quiet.
    Not the verdict of a compare --profile run: its JSON was rewritten into
    modelled time (the host's kept as host_real_time), which the host's
    load does not change."""
    load = doc.get("shootdown_load") or {}
    modelled = any("host_real_time" in b for b in doc.get("benchmarks", []))
    why = option or ("" if modelled or not load.get("loaded")
                     else load.get("why") or "the machine was loaded")
    return "DISTURBED RUN: %s: times are not sound" % why if why else ""


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


def parse_args(argv):
    ap = argparse.ArgumentParser(description="plot shootdown-bench JSON",
                                 usage="%(prog)s JSON [--out DIR] [--note TEXT] "
                                       "[--disturbed TEXT]\n"
                                       "       %(prog)s --modelled DIR [--out DIR] [--note TEXT]")
    ap.add_argument("json", nargs="?", help="Google Benchmark JSON (compare's compare.json)")
    ap.add_argument("--modelled", metavar="DIR",
                    help="draw only the modelled PNG, from DIR/modelled.json")
    ap.add_argument("--out", default=None,
                    help="where the PNGs go (default: the JSON's folder, or --modelled's DIR)")
    ap.add_argument("--note", default="", help="added to every title (e.g. a modelled run's profile)")
    ap.add_argument("--disturbed", metavar="TEXT", default="",
                    help="stamp every plot of the JSON: DISTURBED RUN: TEXT: times are not sound")
    args = ap.parse_args(argv)
    if (args.json is None) == (args.modelled is None):
        ap.error("give either a benchmark JSON or --modelled DIR")
    if args.modelled and args.disturbed:
        ap.error("--disturbed is for a benchmark JSON: modelled time does not depend on the "
                 "host's load")
    return args


def json_pngs(plt, args):
    """The plots of the benchmark JSON, and modelled.png where the output
    folder has the modelled section's table."""
    doc = read(args.json)
    out = Out(plt, args.out or os.path.dirname(os.path.abspath(args.json)), args.note,
              stamp_text(args.disturbed, doc))
    made = [save(out, fig, name) for name, fig in figures(out, from_doc(doc))]
    return made + modelled_pngs(out, out.dir)


def main(argv=None):
    args = parse_args(argv)
    plt = import_pyplot()
    if plt is None:
        print("plot: matplotlib is not installed (Debian: apt-get install python3-matplotlib); "
              "no plots drawn", file=sys.stderr)
        return 3
    if args.modelled:
        made = modelled_pngs(Out(plt, args.out or args.modelled, args.note), args.modelled)
    else:
        made = json_pngs(plt, args)
    for p in made:
        print("plot: wrote %s" % p)
    if not made:
        print("plot: nothing to draw from %s" % (
            os.path.join(args.modelled, "modelled.json") if args.modelled else args.json),
            file=sys.stderr)
    return 0 if made else 1
