# SPDX-License-Identifier: MIT
"""scripts/handshakes: a runtime's handshakes compared (handshake.h, issue 27).

Each kind (membarrier, signal, poll, mprotect) under each strategy, at 2, 8,
32 and 64 emulated CPUs, on every shipped profile, in modelled time (strict
mode): the requester's time from the request to the last acknowledgement,
and how many of its targets the check found reached. A cell a profile
refuses (a strategy whose mechanism it lacks, more CPUs than it has) is
n/a. Every row also runs at half its handshakes: a cell that moves by more
than 1% between the two depends on the run's length and is marked '?'.

    scripts/handshakes [--bench PATH] [--out DIR] [--iterations N]

Writes DIR/handshakes.txt and DIR/handshakes.json (default results/).
"""
import argparse
import concurrent.futures
import json
import os
import queue
import re

from . import DEFAULT_BENCH, ROOT, runner
from .fmt import table
from .results import med

PROFILES = ["milan-36", "ampere-emag-32", "thunderx2-64-vm"]
KINDS = ["membarrier", "signal", "poll", "mprotect"]
STRATEGIES = ["ipi", "gbcast", "broadcast"]
CPUS = [2, 8, 32, 64]
MOVED = 0.01


def name(kind, strategy, n):
    return "handshake/%s/%s/cpus:%d" % (kind, strategy, n)


def run_profile(bench, profile, iterations, pu):
    """One profile's runs, full and half length: {name: (full, half)}."""
    out = {}
    for it in (iterations, max(1, iterations // 2)):
        cmd = runner.command(bench, "^handshake/", iterations=it, profile=profile)
        r = runner.run(cmd, pu=pu)
        for k, v in r.res.items():
            out.setdefault(re.sub(r"/iterations:\d+.*$", "", k), []).append(v)
    return out


def cell(pair):
    """'time reached/targets' of a cell, '?' if it moves with the run's
    length; 'n/a' where the profile refused it."""
    if not pair or pair[0]["errors"]:
        return "n/a", None
    full = pair[0]
    ns = med(full, "handshake_ns")
    reached, targets = med(full, "reached"), med(full, "targets")
    if ns is None or targets is None:
        return "n/a", None
    half = med(pair[1], "handshake_ns") if len(pair) > 1 else None
    moved = half is not None and ns and abs(half / ns - 1) > MOVED
    text = "%.2f us %d/%d%s" % (ns / 1000.0, round(reached * targets), round(targets),
                                " ?" if moved else "")
    return text, {"handshake_ns": ns, "reached": reached, "targets": targets,
                  "half_ns": half, "moved": bool(moved),
                  "refusals": med(full, "refusals")}


def report(results):
    lines, doc = [], {}
    for profile in PROFILES:
        res = results.get(profile, {})
        rows = []
        for kind in KINDS:
            for s in STRATEGIES:
                cells = [cell(res.get(name(kind, s, n))) for n in CPUS]
                if all(c[1] is None for c in cells):
                    continue
                rows.append(["%s/%s" % (kind, s)] + [c[0] for c in cells])
                for n, c in zip(CPUS, cells):
                    if c[1]:
                        doc.setdefault(profile, {})[name(kind, s, n)] = c[1]
        lines.append("")
        lines.append("%s: time from the request to the last acknowledgement (modelled), "
                     "targets reached of targets asked" % profile)
        lines += table(rows, ["kind/strategy"] + ["cpus:%d" % n for n in CPUS])
    return lines, doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default=DEFAULT_BENCH)
    ap.add_argument("--out", default=os.path.join(ROOT, "results"))
    ap.add_argument("--iterations", type=int, default=100,
                    help="handshakes a row (default 100; the half run has half)")
    args = ap.parse_args(argv)
    if not os.access(args.bench, os.X_OK):
        return "handshakes: %s not found; build first" % args.bench
    os.makedirs(args.out, exist_ok=True)
    try:
        pus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pus = [None]
    free = queue.Queue()
    for pu in pus:
        free.put(pu)

    def job(profile):
        pu = free.get()
        try:
            return profile, run_profile(args.bench, profile, args.iterations, pu)
        finally:
            free.put(pu)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(pus)) as pool:
        results = dict(pool.map(job, PROFILES))
    lines, doc = report(results)
    head = ["handshakes (handshake.h), strict modelled time, %d handshakes a row; mutators do "
            "0.5-1.5 us of work between two polls; '?': moves by more than 1%% at half the "
            "handshakes; command: %s" % (args.iterations, runner.shown(
                runner.command(args.bench, "^handshake/", iterations=args.iterations,
                               profile="PROFILE")))]
    text = "\n".join(head + lines) + "\n"
    print(text)
    with open(os.path.join(args.out, "handshakes.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "handshakes.json"), "w") as f:
        json.dump({"iterations": args.iterations, "cells": doc}, f, indent=1)
    return 0
