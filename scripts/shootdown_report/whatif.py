# SPDX-License-Identifier: MIT
"""What decides a modelled row, and what it would be if a value changed.

    scripts/what-if PATCH PARAM [--factors F,...] [--bench PATH] [--out DIR]
    scripts/what-if --decides [PATCH ...] [--bench PATH] [--out DIR]

PATCH is one of the modelled section's patches (skip_broadcast, mrs,
lazy_cpumask, invlpgb); PARAM a cost of its profile (lib/time/params.h's
key, or a distance table such as line_transfer, scaled in every class).

The first form runs the patch's rows with PARAM at each factor of its
profile's value (0.25, 0.5, 1, 2, 4 by default) and prints the rows' values
beside the patch's figures; whatif-PATCH-PARAM.png draws each row against
the value, the patch's figure and the profile's value marked. Each run uses
a profile that inherits the patch's and changes that one value (guide:
"What if: a profile that inherits"); nothing is written into profiles/.

--decides runs every nonzero cost of each patch's profile at 0.5x and 1.5x
and writes decides.json: for each row, the three parameters whose change
moves it most, whether each is an estimate (its source says "estimate",
"no published figure" or "fitted"), and the hash of the profile it was
computed from. scripts/compare prints that beside the modelled table
(marked stale once the profile changes or the row's value moves). The rows
run as the section runs them, at their reported CPU counts only. On two
PUs lazy_cpumask takes about 5 min, skip_broadcast 15, mrs 13,
invlpgb_threads 44 and invlpgb 70; decides.json is written after each
patch, so a run stopped part-way keeps the patches it finished.
"""
import argparse
import concurrent.futures
import json
import os
import queue
import subprocess
import sys
import tempfile
import time

from . import ROOT, reference
from . import modelled, plot
from .decided import DECIDES, profile_hash, profile_path
from .fmt import fig_value

# Each modelled patch's rows (patches.py names them).
ROWS = {"skip_broadcast": modelled.rows_skip_broadcast, "mrs": modelled.rows_mrs,
        "lazy_cpumask": modelled.rows_lazy, "invlpgb": modelled.rows_invlpgb,
        "invlpgb_threads": modelled.rows_invlpgb_threads}

# The rows the table reports, and only those: the skip-broadcast ratio is
# taken at 32 CPUs (the section also runs 1 and 8 for the plots).
FILTERS = {"skip_broadcast": r"^mprotect_threaded/(broadcast|local)/cpus:32/"}

ESTIMATE_WORDS = ("estimate", "no published figure", "fitted")


def profile_costs(name):
    """{key: (value, source)}: a cost's ns, or a distance table's
    {class: ns}, with its source (a table's first class's)."""
    with open(profile_path(name)) as f:
        costs = json.load(f)["costs"]
    out = {}
    for key, v in costs.items():
        if "ns" in v:
            out[key] = (v["ns"], v.get("source", ""))
        else:
            table = {d: e["ns"] for d, e in v.items() if isinstance(e, dict)}
            src = next((e.get("source", "") for e in v.values() if isinstance(e, dict)), "")
            out[key] = (table, src)
    return out


def is_estimate(source):
    s = source.lower()
    return any(w in s for w in ESTIMATE_WORDS)


def scaled(value, factor):
    if isinstance(value, dict):
        return {d: ns * factor for d, ns in value.items()}
    return value * factor


def write_overlay(base, param, value, directory):
    """A profile inheriting @base with @param at @value; its path."""
    if isinstance(value, dict):
        cost = {d: {"ns": ns, "source": "what-if"} for d, ns in value.items()}
    else:
        cost = {"ns": value, "source": "what-if"}
    doc = {"format": "shootdown-profile-1", "name": "%s-whatif" % base,
           "inherits": profile_path(base), "costs": {param: cost}}
    fd, path = tempfile.mkstemp(prefix="whatif-", suffix=".json", dir=directory)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


def runs_of(patch):
    return [r for r in modelled.RUNS if r["key"] == patch]


def run_patch(bench, patch, profile, out_dir, pu):
    """The patch's bench runs under @profile (a path): {name: result}."""
    res = {}
    for run in runs_of(patch):
        r = dict(run, profile=profile)
        if patch in FILTERS:
            r["filter"] = FILTERS[patch]
        out, line = modelled.run_one(bench, r, False, out_dir, pu, time.time())
        if not out:
            raise RuntimeError(line)
        res.update(out)
    return res


def rows_of(patch, res):
    """[(measure, patch's figure, ours)] of @patch's rows from @res."""
    ref = reference.load()
    return [("%s: %s" % (row[1], row[2]), fig_value(row[3]), fig_value(row[4]))
            for row in ROWS[patch](res, ref)]


class Pool:
    """Jobs on the PUs, one bench run per PU at a time (as the section)."""

    def __init__(self, bench, work_dir):
        self.bench, self.work_dir = bench, work_dir
        self.pus = modelled.pus()

    def map(self, jobs):
        """@jobs: [(patch, profile path)]; their rows, in order."""
        free = queue.Queue()
        for pu in self.pus:
            free.put(pu)

        def one(job):
            patch, profile = job
            pu = free.get()
            try:
                d = tempfile.mkdtemp(dir=self.work_dir)
                return rows_of(patch, run_patch(self.bench, patch, profile, d, pu))
            finally:
                free.put(pu)
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.pus)) as ex:
            return list(ex.map(one, jobs))


def sweep(args):
    patch, param = args.patch, args.param
    base = runs_of(patch)[0]["profile"]
    costs = profile_costs(base)
    if param not in costs:
        sys.exit("what-if: %s has no cost '%s'" % (base, param))
    value, source = costs[param]
    factors = [float(f) for f in args.factors.split(",")]
    # Before the runs: without matplotlib here it re-runs this script under
    # Debian's python3, which has it.
    plt = plot.import_pyplot()
    with tempfile.TemporaryDirectory(prefix="sd-whatif-") as work:
        jobs = [(patch, write_overlay(base, param, scaled(value, f), work)) for f in factors]
        results = Pool(args.bench, work).map(jobs)
    print("what-if: %s on %s, %s (profile: %s; %s)" % (patch, base, param, value,
                                                       "estimate" if is_estimate(source)
                                                       else "sourced"))
    measures = [m for m, _, _ in results[0]]
    print("%-12s" % "factor" + "".join("  %-44s" % m[:44] for m in measures))
    for f, rows in zip(factors, results):
        print("%-12s" % ("%gx" % f) + "".join("  %-44s" % ("%.4g" % o if o is not None else "-")
                                              for _, _, o in rows))
    print("%-12s" % "patch's" + "".join("  %-44s" % ("%.4g" % t if t is not None else "-")
                                        for _, t, _ in results[0]))
    if plt:
        plot_sweep(plt, args, value, factors, results)
    else:
        print("what-if: matplotlib is not installed (python3-matplotlib); no plot")
    return 0


def plot_sweep(plt, args, value, factors, results):
    measures = [m for m, _, _ in results[0]]
    fig, axes = plt.subplots(len(measures), 1, figsize=(7, 2.6 * len(measures)), squeeze=False)
    xs = [f * (value if not isinstance(value, dict) else 1) for f in factors]
    for i, m in enumerate(measures):
        ax = axes[i][0]
        ys = [rows[i][2] for rows in results]
        ax.plot(xs, ys, "o-", label="modelled")
        theirs = results[0][i][1]
        if theirs is not None:
            ax.axhline(theirs, color="C3", linestyle="--", label="the patch's figure")
        ax.axvline(xs[factors.index(1.0)] if 1.0 in factors else xs[0], color="grey",
                   linestyle=":", label="the profile's value")
        ax.set_xscale("log")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel(args.param + (" (x the profile's table)" if isinstance(value, dict)
                                    else " (ns)"))
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(args.out, "whatif-%s-%s.png" % (args.patch, args.param))
    fig.savefig(path, dpi=110)
    print("what-if: wrote " + path)


def decides(args):
    patches = args.patches or list(ROWS)
    doc = {"date": time.strftime("%Y-%m-%d"), "command": "scripts/what-if --decides",
           "commit": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip(),
           "profiles": {}, "rows": {}}
    if os.path.exists(DECIDES) and args.patches:
        with open(DECIDES) as f:
            old = json.load(f)
        doc["profiles"], doc["rows"] = old.get("profiles", {}), old.get("rows", {})
    work = tempfile.mkdtemp(prefix="sd-whatif-")
    pool = Pool(args.bench, work)
    for patch in patches:
        base = runs_of(patch)[0]["profile"]
        costs = profile_costs(base)
        cands = [k for k, (v, _) in sorted(costs.items())
                 if (any(x > 0 for x in v.values()) if isinstance(v, dict) else v > 0)]
        jobs = [(patch, profile_path(base))]
        for k in cands:
            for f in (0.5, 1.5):
                jobs.append((patch, write_overlay(base, k, scaled(costs[k][0], f), work)))
        t0 = time.time()
        results = pool.map(jobs)
        print("what-if --decides: %s, %d parameters, %.0f s" % (patch, len(cands),
                                                               time.time() - t0), flush=True)
        doc["profiles"][base] = profile_hash(base)
        for i, (measure, theirs, ours) in enumerate(results[0]):
            moves = []
            for j, k in enumerate(cands):
                lo, hi = results[1 + 2 * j][i][2], results[2 + 2 * j][i][2]
                if ours is None or lo is None or hi is None:
                    continue
                moves.append((max(abs(lo - ours), abs(hi - ours)) / ours, k, lo, hi))
            moves.sort(reverse=True)
            doc["rows"]["%s/%s" % (patch, measure)] = {
                "patch": patch, "profile": base, "measure": measure, "modelled": ours,
                "theirs": theirs, "commit": doc["commit"], "date": doc["date"],
                "profile_hash": doc["profiles"][base],
                "top": [{"param": k, "at_half": lo, "at_one_and_a_half": hi,
                         "moves": round(mv, 4), "estimate": is_estimate(costs[k][1])}
                        for mv, k, lo, hi in moves[:3]]}
        # After each patch: a run stopped part-way keeps what it finished.
        write_decides(doc)
    subprocess.run(["rm", "-rf", work])
    return 0


def write_decides(doc):
    tmp = DECIDES + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, DECIDES)
    print("what-if --decides: wrote " + DECIDES, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("patch", nargs="?", choices=sorted(ROWS))
    ap.add_argument("param", nargs="?")
    ap.add_argument("--factors", default="0.25,0.5,1,2,4")
    ap.add_argument("--decides", nargs="*", dest="patches", metavar="PATCH")
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "shootdown-bench"))
    ap.add_argument("--out", default=os.path.join(ROOT, "results"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if not os.access(args.bench, os.X_OK):
        sys.exit("what-if: no bench at %s (--bench PATH)" % args.bench)
    if args.patches is not None:
        bad = [p for p in args.patches if p not in ROWS]
        if bad:
            sys.exit("what-if: unknown patch %s; the patches: %s" % (bad[0], ", ".join(ROWS)))
        return decides(args)
    if not args.patch or not args.param:
        ap.error("give PATCH and PARAM, or --decides")
    return sweep(args)
