#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The report package on a fake Google Benchmark JSON with the new names
(lru:<global|percpu> as its own path element), repetitions, counters and
aggregates: name parsing, compare's table and guard, bench-ratios' ratios,
the reference data, and plot's exit status without matplotlib."""
import copy
import json
import re
import io
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts")
sys.path.insert(0, SCRIPTS)

from shootdown_report import ab, compare, fmt, model_check, modelled, names, ratios, reference, results  # noqa: E402,E501
from shootdown_report import components, decided, handshakes, mechanisms, patches, whatif  # noqa: E402,E501


def bench(name, reps, time_unit="ns", **counters):
    """Google Benchmark entries for @name: one per repetition, each a dict of
    real_time and counters, plus a median aggregate that must be ignored."""
    out = []
    for i, rep in enumerate(reps):
        b = {"name": name + "/real_time", "run_name": name + "/real_time",
             "run_type": "iteration", "repetitions": len(reps), "repetition_index": i,
             "threads": 1, "iterations": 100, "time_unit": time_unit,
             "real_time": rep["real_time"], "cpu_time": rep["real_time"]}
        b.update({k: v for k, v in rep.items() if k != "real_time"})
        b.update(counters)
        out.append(b)
    out.append({"name": name + "/real_time_median", "run_name": name + "/real_time",
                "run_type": "aggregate", "aggregate_name": "median", "time_unit": time_unit,
                "real_time": 1e9, "cpu_time": 1e9, "iterations": 2, "loops_per_s": 1.0})
    return out


TF2_VANILLA = "tlb_flush2_threads/ipi/lru:global/cpus:2"
TF2_BOTH = "tlb_flush2_threads/gbcast/lru:percpu/cpus:2"
TF2_BOTH_T0 = "tlb_flush2_threads/gbcast:threshold=0/lru:percpu/cpus:2"
RANGE = "range_flush/broadcast:range=descending/cpus:2/pages:511"
MPROT = "mprotect_threaded/%s/cpus:2"

DOC = {"context": {"date": "2026-11-25"}, "benchmarks": (
    bench(TF2_VANILLA, [{"real_time": 9000, "loops_per_s": 100e3},
                        {"real_time": 8000, "loops_per_s": 120e3}], violations=0) +
    bench(TF2_BOTH, [{"real_time": 3000, "loops_per_s": 330e3},
                     {"real_time": 3000, "loops_per_s": 330e3}], violations=0) +
    bench(TF2_BOTH_T0, [{"real_time": 2000, "loops_per_s": 440e3},
                        {"real_time": 2000, "loops_per_s": 460e3}], violations=0) +
    bench(RANGE, [{"real_time": 4.6, "time_unit": "us"}], time_unit="us",
          tlbi_ops=3, asid_ops=0, violations=0) +
    bench(MPROT % "broadcast", [{"real_time": 400}, {"real_time": 420}, {"real_time": 380}],
          violations=0, remote_invalidations_per_flush=1) +
    bench(MPROT % "local", [{"real_time": 200}, {"real_time": 190}, {"real_time": 210}],
          violations=0, remote_invalidations_per_flush=0))}


def cells(lines, row):
    """The cells of table row @row (split on two or more spaces)."""
    import re
    for line in lines:
        parts = re.split(r"\s{2,}", line.strip())
        if parts[0] == row:
            return parts[1:]
    raise AssertionError("no row %r in:\n%s" % (row, "\n".join(lines)))


class Names(unittest.TestCase):
    def test_new_shape(self):
        p = names.parse(TF2_BOTH_T0 + "/real_time")
        self.assertEqual(p.workload, "tlb_flush2_threads")
        self.assertEqual(p.strategy, "gbcast:threshold=0")
        self.assertEqual(p.kind, "gbcast")
        self.assertEqual(p.options, {"threshold": "0"})
        self.assertEqual(p.params["lru"], "percpu")
        self.assertEqual(p.count(), ("cpus", 2))
        self.assertEqual(p.variant, "gbcast:threshold=0/lru:percpu")

    def test_old_shapes(self):
        p = names.parse("trap_dispatch/locked/threads:8/iterations:2/manual_time")
        self.assertEqual((p.workload, p.strategy, p.count()), ("trap_dispatch", "locked",
                                                              ("threads", 8)))
        p = names.parse(RANGE)
        self.assertEqual((p.options["range"], p.params["pages"]), ("descending", "511"))
        self.assertNotIn("lru", p.params)
        self.assertEqual(names.parse("baseline/cacheline_roundtrip").params, {})

    def test_build_round_trips(self):
        built = names.build("tlb_flush2_threads", names.with_lru("gbcast:threshold=0", "percpu"), 2)
        self.assertEqual(built, TF2_BOTH_T0)
        self.assertEqual(names.build("range_flush", "broadcast:range=descending", 2, pages=511),
                         RANGE)
        self.assertEqual(ratios.tf2("ipi", 2, "global"), TF2_VANILLA)
        self.assertEqual(ratios.tf2_config("gbcast", "percpu", 2), TF2_BOTH_T0)


    def test_default_lru_alias(self):
        self.assertEqual(names.default_lru_alias("tlb_flush2_threads/ipi/cpus:2"),
                         "tlb_flush2_threads/ipi/lru:percpu/cpus:2")
        self.assertEqual(names.default_lru_alias(TF2_BOTH_T0),
                         "tlb_flush2_threads/gbcast:threshold=0/cpus:2")
        self.assertIsNone(names.default_lru_alias(TF2_VANILLA))     # global: no other name
        self.assertIsNone(names.default_lru_alias(MPROT % "local"))  # no LRU element


class Results(unittest.TestCase):
    def test_repetitions_counters_aggregates(self):
        res = results.from_doc(DOC)
        self.assertEqual(sorted(res), sorted([TF2_VANILLA, TF2_BOTH, TF2_BOTH_T0, RANGE,
                                              MPROT % "broadcast", MPROT % "local"]))
        self.assertEqual(res[TF2_VANILLA]["counters"]["loops_per_s"], [100e3, 120e3])
        self.assertEqual(results.med(res[TF2_VANILLA], "loops_per_s"), 110e3)
        self.assertEqual(results.med(res[MPROT % "local"]), 200)
        self.assertEqual(results.med(res[RANGE]), 4600)          # us -> ns

    def test_default_lru_found_either_way(self):
        doc = {"benchmarks": bench("tlb_flush2_threads/broadcast/lru:percpu/cpus:2",
                                   [{"real_time": 1, "loops_per_s": 7.0}]) +
               bench("tlb_flush2_threads/ipi/cpus:2", [{"real_time": 1, "loops_per_s": 5.0}])}
        res = results.from_doc(doc)
        self.assertEqual(results.med(res.get("tlb_flush2_threads/broadcast/cpus:2"),
                                     "loops_per_s"), 7.0)
        self.assertIn(ratios.tf2("ipi", 2, "percpu"), res)
        self.assertNotIn(ratios.tf2("ipi", 2, "global"), res)
        run = ratios.parse_run(doc)
        self.assertAlmostEqual(ratios.ratios_of(run)["tf2_broadcast_vs_ipi_cpus2"], 7.0 / 5.0)


class Fmt(unittest.TestCase):
    def test_noisy_is_half_the_range_over_the_median(self):
        self.assertEqual(0.20, fmt.NOISY_SPREAD)
        self.assertTrue(fmt.noisy([100, 100, 150]))         # 25%
        self.assertFalse(fmt.noisy([100, 110, 139]))        # 17.7%
        self.assertFalse(fmt.noisy([100, 100, 140]))        # 20%: not more
        self.assertFalse(fmt.noisy([50, 150]))              # two say too little

    def test_number_reads_a_cell_back(self):
        self.assertEqual([15.56, 198, 527e3, 1.16e6, 99.5, 90, None],
                         [fmt.number(c) for c in ("15.56x", "198x", "527k/s", "1.16M/s",
                                                  "99.5%", ">= 90%", "-")])


class Compare(unittest.TestCase):
    def setUp(self):
        self.res = results.from_doc(DOC)
        self.lines = compare.report(self.res, [2], 2, [])

    def test_tables(self):
        # A measured run's rows say what runs each strategy on this host.
        self.assertEqual(cells(self.lines, "ipi/lru:global [signals]"), ["110k/s 1.00x"])
        self.assertEqual(cells(self.lines, "gbcast/lru:percpu [shm bcast+signals]"),
                         ["330k/s 3.00x"])
        # Three repetitions: 190-210 and 380-420 ns, half the range 5%.
        self.assertEqual(cells(self.lines, "local [shm bcast]"), ["200 ns ±5% 2.00x"])
        self.assertEqual(cells(self.lines, "broadcast [shm bcast]")[0], "400 ns ±5% 1.00x")
        # Range ops reported as measured: 3 ops for 511 pages, 4.6 us.
        self.assertEqual(cells(self.lines, "descending"), ["3 (4.6 us)"])

    def test_tlb_flush2_changes_one_thing_at_a_time(self):
        doc = {"benchmarks": (
            bench(TF2_VANILLA, [{"real_time": 9000, "loops_per_s": 100e3}]) +
            bench("tlb_flush2_threads/ipi/lru:percpu/cpus:2",
                  [{"real_time": 9000, "loops_per_s": 150e3}]) +
            bench("tlb_flush2_threads/broadcast/lru:percpu/cpus:2",
                  [{"real_time": 9000, "loops_per_s": 300e3}]))}
        lines = compare.report(results.from_doc(doc), [2], 2, [], fidelity=False)
        self.assertEqual(cells(lines, "ipi/lru:percpu"), ["150k/s 1.50x"])
        # broadcast is against ipi at the same LRU setting, not vanilla.
        self.assertEqual(cells(lines, "broadcast (x vs ipi/lru:percpu)"), ["300k/s 2.00x"])

    def test_check_passes(self):
        self.assertEqual(compare.check(list(self.res), self.res), [])

    def test_load_verdict(self):
        # A high load average alone (the build that just ran) is not a load.
        quiet = compare.load_verdict(0.1, [0.99, 0.97], 2, load1=11.3)
        self.assertFalse(quiet["loaded"])
        self.assertTrue(compare.load_verdict(1.5, [0.99, 0.99], 2)["loaded"])
        squeezed = compare.load_verdict(0.1, [0.99, 0.45], 2)
        self.assertTrue(squeezed["loaded"])
        self.assertIn("45%", squeezed["why"])

    def test_loaded_run_withholds_limit_ratios(self):
        doc = copy.deepcopy(DOC)
        doc["benchmarks"] += bench("baseline/cacheline_roundtrip", [{"real_time": 50}])
        res = results.from_doc(doc)
        quiet = compare.report(res, [2], 2, [], compare.load_verdict(0.0, [1.0, 1.0], 2))
        loaded = compare.report(res, [2], 2, [], compare.load_verdict(3.0, [0.5, 0.5], 2))
        self.assertFalse(any("WARNING" in l for l in quiet))
        self.assertTrue(loaded[0].startswith("WARNING: the machine was loaded"))
        self.assertTrue(any("lim ?" in l for l in loaded))
        self.assertFalse(any(re.search(r"[0-9.]+x lim", l) for l in loaded))
        self.assertTrue(any(re.search(r"[0-9.]+x lim", l) for l in quiet))

    def test_check_catches(self):
        res = copy.deepcopy(self.res)
        res[RANGE]["counters"]["tlbi_ops"] = [2.5]
        del res[RANGE]["counters"]["asid_ops"]
        res[MPROT % "local"]["counters"]["remote_invalidations_per_flush"] = [0, 1, 0]
        res[TF2_BOTH]["counters"]["violations"] = [0, 2]
        bad = compare.check(list(res) + ["missing/ipi/cpus:2"], res)
        self.assertEqual(len(bad), 5, bad)


class Profile(unittest.TestCase):
    """compare --profile: cells in modelled time, rates rescaled, natives out."""

    def test_to_model_time_rewrites_times_and_rates(self):
        doc = {"benchmarks": (
            bench(TF2_VANILLA, [{"real_time": 9000, "loops_per_s": 100e3, "model_ns": 3000,
                                 "cpu_ns_per_loop": 5000}], violations=0) +
            bench(RANGE, [{"real_time": 4.6, "time_unit": "us", "model_ns": 2300}],
                  time_unit="us", tlbi_ops=3, violations=0) +
            bench("tlb_flush2_threads/native/cpus:2", [{"real_time": 500}]))}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.json")
            with open(path, "w") as f:
                json.dump(doc, f)
            compare.to_model_time(path)
            res = results.load(path)[1]
        # Host 9 us per loop at 100k/s becomes 3 us modelled: 300k/s.
        self.assertEqual(res[TF2_VANILLA]["real_ns"], [3000])
        self.assertAlmostEqual(res[TF2_VANILLA]["counters"]["loops_per_s"][0], 300e3)
        self.assertEqual(res[RANGE]["real_ns"], [2300])
        self.assertNotIn("cpu_ns_per_loop", res[TF2_VANILLA]["counters"])
        self.assertNotIn("tlb_flush2_threads/native/cpus:2", res)

    def test_profile_pus_from_the_topology(self):
        self.assertEqual(compare.profile_pus("milan-36"), 36)
        self.assertEqual(compare.profile_pus("thunderx2-64-vm"), 64)
        self.assertIsNone(compare.profile_pus("no-such-profile"))

    def test_report_without_fidelity_drops_the_natives(self):
        lines = compare.report(results.from_doc(DOC), [2], 2, [], fidelity=False)
        self.assertFalse([l for l in lines if l.strip().startswith("native")])
        self.assertFalse([l for l in lines if "fidelity" in l.lower()])


class Ratios(unittest.TestCase):
    def test_within_run(self):
        run = ratios.parse_run(DOC)
        self.assertEqual(run[TF2_VANILLA]["counters"]["loops_per_s"], 110e3)
        r = ratios.ratios_of(run)
        self.assertAlmostEqual(r["tf2_gbcast_percpu_t0_vs_ipi_global_cpus2"], 450e3 / 110e3)
        self.assertAlmostEqual(r["tf2_config_both_vs_vanilla_cpus2"], 450e3 / 110e3)
        self.assertNotIn("tf2_lru_percpu_vs_global_ipi_cpus2", r)     # no ipi/lru:percpu
        report = [ratios.report_run(0, DOC, {})]
        _, _, _, med = ratios.medians(report)
        goal = [g for g in ratios.goals_of(report, {}, {}, med)
                if g["key"] == "tf2_gbcast_percpu_t0_vs_ipi_global_cpus2"][0]
        self.assertTrue(goal["met"])


class Ab(unittest.TestCase):
    """bench-ab: OLD then NEW each round, medians per side, their ratio."""

    def test_rounds_alternate_and_ratios_are_of_medians(self):
        calls = []
        fake = {"old": {"tlb_lookup/sd_access/cpus:1": [4.0, 5.0, 4.0]},
                "new": {"tlb_lookup/sd_access/cpus:1": [2.0, 3.0, 2.0]}}

        def run(binary, wanted, min_time):
            calls.append(binary)
            v = fake[binary]["tlb_lookup/sd_access/cpus:1"][calls.count(binary) - 1]
            return {"tlb_lookup/sd_access/cpus:1": (v, False)}

        saved, ab.run = ab.run, run
        try:
            pair = ("tlb_lookup/sd_access/cpus:1",) * 2
            seen = ab.measure("old", "new", [pair], 3, 0.1)
        finally:
            ab.run = saved
        self.assertEqual(["old", "new"] * 3, calls)
        self.assertEqual(([4.0, 5.0, 4.0], [2.0, 3.0, 2.0], False), seen[pair])
        out = io.StringIO()
        ab.report(seen, out)
        self.assertIn("0.500", out.getvalue())     # median 2 over median 4

    def test_old_side_takes_whichever_spelling_it_knows(self):
        old_name, new_name = "tf2/gbcast:lru=percpu/cpus:2", "tf2/gbcast/lru:percpu/cpus:2"

        def run(binary, wanted, min_time):
            # Both OLD and NEW here are built after the rename.
            self.assertIn(new_name, wanted)
            return {new_name: (100.0 if binary == "old" else 150.0, True)}

        saved, ab.run = ab.run, run
        try:
            pair = (old_name, new_name)
            seen = ab.measure("old", "new", [pair], 2, 0.1)
        finally:
            ab.run = saved
        self.assertEqual(([100.0, 100.0], [150.0, 150.0], True), seen[pair])

    def test_a_benchmark_missing_on_one_side_is_said(self):
        out = io.StringIO()
        ab.report({("a/b/cpus:1",) * 2: ([], [1.0], False)}, out)
        self.assertIn("no result", out.getvalue())


class Reference(unittest.TestCase):
    def test_every_figure_names_its_source(self):
        ref = reference.load()
        for key, table in ref.items():
            if key in ("about", "sources"):
                continue
            src = ref["sources"][table["source"]]
            for field in ("title", "author", "where", "machine"):
                self.assertTrue(src.get(field), (key, field))
            self.assertTrue(table.get("unit"), key)
        self.assertEqual(ref["tlb_flush2_threads"]["configurations"]["both"], 1157000)
        self.assertEqual(reference.by_count(ref["trap_dispatch"])[64][0], 65.40)
        with open(reference.PATH) as f:
            self.assertNotIn("seed", f.read().lower())


class Patches(unittest.TestCase):
    """patches.py describes each reproduced patch once; the section, what-if
    and reference.json agree with it."""

    def test_every_modelled_run_and_what_if_is_a_patch_on_its_profile(self):
        for run in modelled.RUNS:
            p = patches.get(run["key"])
            self.assertEqual(p["profile"], run["profile"], run["key"])
            self.assertTrue(os.path.exists(os.path.join(components.PROFILES,
                                                        p["profile"] + ".json")))
        self.assertEqual(set(whatif.ROWS), {r["key"] for r in modelled.RUNS})

    def test_every_figure_table_is_of_the_patch_source(self):
        ref = reference.load()
        used = set()
        for p in patches.PATCHES:
            for table in p["figures"]:
                self.assertEqual(p["source"], ref[table]["source"], (p["key"], table))
                used.add(table)
        self.assertEqual({k for k in ref if k not in ("about", "sources")}, used,
                         "a published table no patch claims")

    def test_every_measured_block_names_the_patch_of_its_workload(self):
        for w in compare.WORKLOADS:
            p = patches.of_workload(w["key"])
            self.assertIsNotNone(p, w["key"])
            self.assertEqual(p["title"], w["patch"], w["key"])

    def test_rows_are_labelled_from_the_description(self):
        ref = reference.load()
        rows = modelled.all_rows({}, ref)
        self.assertTrue(rows)
        labels = {p["label"] for p in patches.PATCHES}
        for row in rows:
            self.assertIn(row[0], labels)
            self.assertTrue(row[1].startswith(patches.profile(
                next(p["key"] for p in patches.PATCHES if p["label"] == row[0]))), row)


class WhatIf(unittest.TestCase):
    """scripts/what-if: the overlay it writes, the figures it reads back,
    and the lines scripts/compare prints from decides.json."""

    def test_overlay_inherits_and_changes_one_cost(self):
        with tempfile.TemporaryDirectory() as d:
            path = whatif.write_overlay("ampere-emag-32", "dvm_target", 50.0, d)
            with open(path) as f:
                doc = json.load(f)
            self.assertEqual("shootdown-profile-1", doc["format"])
            self.assertTrue(doc["inherits"].endswith("profiles/ampere-emag-32.json"))
            self.assertEqual({"dvm_target": {"ns": 50.0, "source": "what-if"}}, doc["costs"])
            table = whatif.scaled({"core": 10.0, "llc": 20.0}, 1.5)
            path = whatif.write_overlay("milan-36", "line_transfer", table, d)
            with open(path) as f:
                cost = json.load(f)["costs"]["line_transfer"]
            self.assertEqual({"ns": 30.0, "source": "what-if"}, cost["llc"])

    def test_figures_read_back_as_numbers(self):
        self.assertEqual(1.06, fmt.fig_value("1.06x"))
        self.assertEqual(329000, fmt.fig_value("329k/s"))
        self.assertEqual(81.7, fmt.fig_value("81.7%"))
        self.assertEqual(90, fmt.fig_value(">= 90%"))
        self.assertIsNone(fmt.fig_value("-"))

    def test_estimates_are_told_from_sourced_values(self):
        self.assertTrue(whatif.is_estimate("no published figure found; estimate: ~6 cycles"))
        self.assertTrue(whatif.is_estimate("fitted to the 2.1 us round trip"))
        self.assertFalse(whatif.is_estimate("AnandTech, 'The Ampere eMAG System' (2020)"))

    def test_decided_lines_mark_a_changed_profile_stale(self):
        with tempfile.TemporaryDirectory() as d:
            saved = decided.DECIDES
            decided.DECIDES = os.path.join(d, "decides.json")
            try:
                self.assertIn("not computed", decided.decided_lines([])[0])
                row = {"patch": "skip_broadcast", "profile": "ampere-emag-32",
                       "measure": "ampere-emag-32, 32 CPUs: broadcast / local",
                       "modelled": 1.06, "theirs": 15.56,
                       "top": [{"param": "dvm_target", "at_half": 1.03,
                                "at_one_and_a_half": 1.09, "moves": 0.03, "estimate": True}]}
                for digest, stale in ((decided.profile_hash("ampere-emag-32"), False),
                                      ("0" * 40, True)):
                    with open(decided.DECIDES, "w") as f:
                        json.dump({"commit": "abc", "date": "2026-11-27",
                                   "profiles": {"ampere-emag-32": digest},
                                   "rows": {"skip_broadcast/x": row}}, f)
                    lines = decided.decided_lines([])
                    self.assertIn("dvm_target* 1.03..1.09", lines[1])
                    self.assertEqual(stale, "stale" in lines[1])
                # The profile unchanged, the row's value moved (the model
                # changed): stale, saying what it was; within 3%: not.
                with open(decided.DECIDES, "w") as f:
                    json.dump({"commit": "abc", "date": "2026-11-27",
                               "profiles": {"ampere-emag-32": decided.profile_hash("ampere-emag-32")},
                               "rows": {"skip_broadcast/x": row}}, f)
                for shown, stale in (("1.07x", False), ("1.12x", True)):
                    table = [["skip broadcast", "ampere-emag-32, 32 CPUs", "broadcast / local",
                              "15.56x", shown, shown, "miss"]]
                    lines = decided.decided_lines(table)
                    self.assertEqual(stale, "stale: the row was 1.06 then" in lines[1], lines[1])
                # A row kept from an older run (--decides for other patches)
                # is judged by its own profile hash, and says when it ran.
                old = dict(row, profile_hash="0" * 40, commit="old", date="2026-11-01")
                with open(decided.DECIDES, "w") as f:
                    json.dump({"commit": "abc", "date": "2026-11-27",
                               "profiles": {"ampere-emag-32": decided.profile_hash("ampere-emag-32")},
                               "rows": {"skip_broadcast/x": old}}, f)
                line = decided.decided_lines([])[1]
                self.assertIn("stale: ampere-emag-32 changed since", line)
                self.assertIn("(at old, 2026-11-01)", line)
            finally:
                decided.DECIDES = saved

    def test_shown_value_reads_every_cell_format(self):
        self.assertEqual(1.26, decided.shown_value("1.26x"))
        self.assertEqual(1.1e6, decided.shown_value("1.1M/s"))
        self.assertEqual(527e3, decided.shown_value("527k/s"))
        self.assertEqual(83.7, decided.shown_value("83.7%"))
        self.assertIsNone(decided.shown_value("n/a"))


class Plot(unittest.TestCase):
    def test_exit_3_without_matplotlib(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "fake.json")
            with open(path, "w") as f:
                json.dump(DOC, f)
            p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "plot"), path],
                               env=hide_matplotlib(tmp), capture_output=True, text=True,
                               timeout=60)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("matplotlib is not installed", p.stderr)

    def test_series_colours_and_spread(self):
        from shootdown_report import plot
        by = plot.series(results.from_doc(DOC))
        # MPROT local at 2 CPUs: median 200, repetitions 190-210, not noise.
        self.assertEqual(by["mprotect_threaded"]["local"], [(2, 200, False, 190, 210, False)])
        # A strategy keeps its colour whatever else is drawn, and its LRU
        # setting or options do not change it.
        self.assertEqual(plot.colour_of("gbcast/lru:percpu"), plot.colour_of("gbcast"))
        self.assertEqual(plot.colour_of("gbcast:threshold=0"), plot.colour_of("gbcast"))
        self.assertNotEqual(plot.colour_of("broadcast"), plot.colour_of("local"))
        self.assertEqual(plot.colour_of("some_user_strategy"), plot.colour_of("some_user_strategy"))

    def test_plots_draw_from_a_comparison(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.json")
            with open(path, "w") as f:
                json.dump(DOC, f)
            write_modelled(tmp)
            p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "plot"), path, "--note",
                                "a note", "--disturbed", "load 3"], capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("range_ops.png", p.stdout)
            self.assertIn("modelled.png", p.stdout)      # modelled.json was there

    def test_modelled_png_alone(self):
        """plot --modelled DIR: modelled.png from DIR/modelled.json and
        nothing else; 1 without one, 3 without matplotlib."""
        if plot_lib() is None:
            self.skipTest("matplotlib is not installed")
        with tempfile.TemporaryDirectory() as tmp:
            script = [sys.executable, os.path.join(SCRIPTS, "plot"), "--modelled", tmp]
            p = subprocess.run(script, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("modelled.json", p.stderr)
            write_modelled(tmp)
            p = subprocess.run(script, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(["modelled.json", "modelled.png"], sorted(os.listdir(tmp)))
            hidden = hide_matplotlib(tmp)
            p = subprocess.run(script, capture_output=True, text=True, timeout=120, env=hidden)
            self.assertEqual(p.returncode, 3, p.stdout + p.stderr)


def plot_lib():
    """(plot module, pyplot), or None without matplotlib."""
    from shootdown_report import plot
    plt = plot.import_pyplot()
    return None if plt is None else (plot, plt)


def hide_matplotlib(tmp):
    """An environment in which importing matplotlib fails."""
    os.makedirs(os.path.join(tmp, "hidden", "matplotlib"), exist_ok=True)
    with open(os.path.join(tmp, "hidden", "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('hidden by test_report')\n")
    return dict(os.environ, PYTHONPATH=os.path.join(tmp, "hidden"), SD_PLOT_SYSTEM_PYTHON="1")


# A modelled section of 4 patches and 11 rows, as modelled.write_json()
# writes it (cells as the table prints them).
MODELLED_ROWS = [
    ["skip broadcast", "ampere-emag-32, 32 CPUs", "broadcast / local", "15.56x", "1.12x",
     "miss (-93%)"],
    ["MRS rework", "thunderx2-64-vm, 1 threads", "locked / direct", "1.21x", "1.10x",
     "miss (gain 10% of 21%)"],
    ["MRS rework", "thunderx2-64-vm, 2 threads", "locked / direct", "1.52x", "2.52x",
     "miss (+65%)"],
    ["MRS rework", "thunderx2-64-vm, 4 threads", "locked / direct", "4.50x", "5.04x", "within"],
    ["MRS rework", "thunderx2-64-vm, 64 threads", "locked / direct", "198x", "112x",
     "within (goal >= 50x)"],
    ["lazy mm_cpumask", "milan-36, 36 CPUs", "eager / lazy a message", "1.07x", "1.18x", "within"],
    ["lazy mm_cpumask", "milan-36, 36 CPUs", "cpumask writes saved", ">= 90%", "99.5%", "within"],
    ["INVLPGB", "milan-36, 36 threads", "vanilla loops/s", "527k/s", "330k/s", "miss (-37%)"],
    ["INVLPGB", "milan-36, 36 threads", "LRU fix / vanilla", "1.39x", "1.04x",
     "miss (gain 4% of 39%)"],
    ["INVLPGB", "milan-36, 36 threads", "INVLPGB / vanilla", "1.00x", "-", "-"],
    ["INVLPGB", "milan-36, 36 threads", "both / vanilla", "2.20x", "13.05x", "miss (+494%)"],
]


def write_modelled(out_dir, rows=MODELLED_ROWS):
    modelled.write_json(os.path.join(out_dir, "modelled.json"), rows, 50.0)


def scaling_doc(variants, counts=(1, 2, 4), spread=None):
    """A comparison of tlb_flush2_threads with @variants at @counts, three
    repetitions each; @spread: {(variant, n): (lo, hi)} loops/s."""
    out = []
    for v in variants:
        for n in counts:
            lo, hi = (spread or {}).get((v, n), (99e3, 101e3))
            out += bench(names.build("tlb_flush2_threads", v, n),
                         [{"real_time": 9000, "loops_per_s": x} for x in (lo, 100e3, hi)])
    return {"benchmarks": out}


def series_lines(ax):
    """The labelled lines of @ax: its series, as the legend shows them."""
    return [l for l in ax.get_lines() if not l.get_label().startswith("_")]


class Figures(unittest.TestCase):
    """The plots' figures, inspected as matplotlib objects (Agg)."""

    def setUp(self):
        lib = plot_lib()
        if lib is None:
            self.skipTest("matplotlib is not installed")
        self.plot, self.plt = lib
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.plot.Out(self.plt, self.tmp.name)

    def tearDown(self):
        self.plt.close("all")
        self.tmp.cleanup()

    def scaling(self, doc, out=None):
        strategies = self.plot.series(results.from_doc(doc))["tlb_flush2_threads"]
        fig = self.plot.scaling_figure(out or self.out, "tlb_flush2_threads", strategies)
        return fig, fig.axes[0]

    def test_every_series_distinct_lru_settings_too(self):
        variants = ["ipi/lru:global", "ipi/lru:percpu", "gbcast/lru:global", "gbcast/lru:percpu",
                    "gbcast:threshold=0/lru:global", "gbcast:threshold=0/lru:percpu",
                    "broadcast/lru:percpu", "local/lru:percpu", "native"]
        _, ax = self.scaling(scaling_doc(variants))
        lines = {l.get_label(): (l.get_color(), l.get_linestyle(), l.get_marker())
                 for l in series_lines(ax) if not l.get_label().startswith("the PUs")}
        self.assertEqual(sorted(variants), sorted(lines))
        self.assertEqual(len(variants), len(set(lines.values())), lines)
        # Colour per strategy, style per option.
        self.assertEqual(lines["ipi/lru:global"][0], lines["ipi/lru:percpu"][0])
        self.assertNotEqual(lines["ipi/lru:global"][0], lines["gbcast/lru:global"][0])
        self.assertEqual(lines["ipi/lru:percpu"][1:], lines["gbcast/lru:percpu"][1:])

    def test_styles_tell_apart_every_variant_of_a_strategy(self):
        # Every family of names the benchmarks use in a scaling plot.
        for variants in (["ipi:cpumask=eager", "ipi:cpumask=lazy", "broadcast", "native"],
                         ["ipi:cpumask=eager", "ipi:cpumask=lazy", "ipi:cpumask=lazy,trim_ms=1"],
                         ["native:mode=threads", "native:mode=processes", "local", "ipi"],
                         ["ipi/lru:global", "ipi/lru:percpu"]):
            styles = self.plot.styles(variants)
            got = {(self.plot.colour_of(v),) + styles[v] for v in variants}
            self.assertEqual(len(variants), len(got), styles)

    def test_titles_wrap_inside_the_figure(self):
        out = self.out._replace(note="modelled time on profile thunderx2-64-vm, a long note "
                                     "that would run past the right edge of the figure")
        fig, _ = self.scaling(scaling_doc(["ipi/lru:global", "ipi/lru:percpu"]), out)
        self.plot.layout(out, fig)
        fig.canvas.draw()
        box = fig.bbox
        titles = [t for t in fig.findobj(self.plt.Text) if "a long note" in t.get_text()]
        self.assertEqual(1, len(titles))
        self.assertIn("\n", titles[0].get_text())
        ext = titles[0].get_window_extent()
        self.assertTrue(box.x0 <= ext.x0 and ext.x1 <= box.x1 and ext.y1 <= box.y1, ext)
        # Room left for it: above the axes.
        self.assertGreater(ext.y0, fig.axes[0].get_window_extent().y1)

    def test_noisy_points_hollow(self):
        doc = scaling_doc(["ipi/lru:global"], spread={("ipi/lru:global", 2): (50e3, 150e3)})
        fig, ax = self.scaling(doc)
        hollow = [(tuple(l.get_xdata()), tuple(l.get_ydata())) for l in ax.get_lines()
                  if l.get_marker() not in ("None", "", None)
                  and l.get_markerfacecolor() == "none" and len(l.get_xdata())]
        self.assertEqual([((2,), (100e3,))], hollow)
        line, = [l for l in series_lines(ax) if l.get_label() == "ipi/lru:global"]
        self.assertEqual([0, 2], list(line.get_markevery()))       # 1 and 4 filled
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        self.assertIn("hollow: repetitions spread > 20% (noise)", legend)
        _, quiet = self.scaling(scaling_doc(["ipi/lru:global"]))
        self.assertFalse([t for t in quiet.get_legend().get_texts() if "hollow" in t.get_text()])

    def test_disturbed_stamp(self):
        doc = dict(scaling_doc(["ipi/lru:global", "ipi/lru:percpu"]),
                   shootdown_load={"loaded": True, "why": "others used 1.5 PUs"})
        self.assertEqual("DISTURBED RUN: others used 1.5 PUs: times are not sound",
                         self.plot.stamp_text(None, doc))
        self.assertEqual("DISTURBED RUN: busy: times are not sound",
                         self.plot.stamp_text("busy", {}))
        self.assertEqual("", self.plot.stamp_text(None, dict(doc, shootdown_load={
            "loaded": False, "why": ""})))
        # compare --profile: modelled time, whatever the host's load.
        profiled = copy.deepcopy(doc)
        for b in profiled["benchmarks"]:
            b["host_real_time"] = b["real_time"]
        self.assertEqual("", self.plot.stamp_text(None, profiled))
        out = self.out._replace(stamp=self.plot.stamp_text(None, doc))
        doc["benchmarks"] += DOC["benchmarks"]
        made = self.plot.figures(out, results.from_doc(doc))
        self.assertEqual(["range_ops.png", "scaling-tlb_flush2_threads.png"],
                         sorted(name for name, _ in made))
        for name, fig in made:
            stamps = [t for t in fig.texts if t.get_text().startswith("DISTURBED RUN")]
            self.assertEqual(1, len(stamps), name)
            self.assertEqual("red", stamps[0].get_color())

    def test_modelled_figure_has_every_row(self):
        write_modelled(self.tmp.name)
        fig = self.plot.modelled_figure(self.out, self.plot.load_modelled(self.tmp.name))
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_yticklabels()]
        self.assertEqual(len(MODELLED_ROWS), len(labels))
        texts = "\n".join(t.get_text() for t in ax.texts)
        for row, label in zip(MODELLED_ROWS, labels):
            self.assertIn(row[0], label)
            self.assertIn(row[2], label)
            self.assertIn("patch's %s, modelled %s" % (row[3], row[4]), texts)
            self.assertIn(row[5], texts)
        for patch in ("skip broadcast", "MRS rework", "lazy mm_cpumask", "INVLPGB"):
            self.assertIn(patch, "".join(labels))
        # A dot per row with a modelled value, coloured by its verdict.
        dots = {l.get_label(): len(l.get_xdata()) for l in series_lines(ax)}
        self.assertEqual(10, dots.get("modelled: within", 0) + dots.get("modelled: miss", 0))
        self.assertEqual(4, dots["modelled: within"])
        self.assertIsNone(self.plot.load_modelled(os.path.join(self.tmp.name, "none")))


class Model(unittest.TestCase):
    """model-check pairs model_ns with real time of the same run."""

    @staticmethod
    def bench(name, real, model_ns=None):
        b = {"name": name + "/real_time", "run_name": name + "/real_time",
             "run_type": "iteration", "real_time": real, "cpu_time": real,
             "time_unit": "ns", "iterations": 10}
        if model_ns is not None:
            b["model_ns"] = model_ns
        return b

    def test_self_consistency_pass_and_miss(self):
        doc = {"benchmarks": [self.bench("mprotect_threaded/local/cpus:1", 100, 120),
                              self.bench("mprotect_threaded/local/cpus:2", 100, 130),
                              self.bench("process_churn/local/cpus:1", 100)]}
        rows = model_check.self_consistency(results.from_doc(doc))
        got = {r[0]: r[-1] for r in rows}
        self.assertEqual("pass", got["mprotect_threaded/local/cpus:1"])
        self.assertEqual("miss", got["mprotect_threaded/local/cpus:2"])
        self.assertEqual("no model_ns", got["process_churn/local/cpus:1"])

    def test_native_pairs_twins(self):
        doc = {"benchmarks": [self.bench("context_switch/native/cpus:1", 1000),
                              self.bench("component/pipe_pingpong/ipi/cpus:1", 50, 700),
                              self.bench("context_switch/native/cpus:2", 1000),
                              self.bench("component/pipe_pingpong/ipi/cpus:2", 50, 600)]}
        table = [t for t in model_check.native_table() if "context_switch" in t[2]]
        rounds = [components.ratios(results.from_doc(doc), table)]
        rows = components.rows(rounds, table, model_check.NATIVE_TOL)
        self.assertEqual(["pass", "miss"], [r[-1] for r in rows])
        self.assertEqual("0.70", rows[0][3])

    def test_components_take_the_median_round(self):
        """A component's verdict is its median round's ratio; the range of
        the rounds is shown; a native figure that is a difference (the IPI
        round trip: membarrier with a target less without) is taken as one."""
        def doc(nat1, nat0, emu):
            return {"benchmarks": [
                self.bench("component/ipi_roundtrip/native/targets:1", nat1),
                self.bench("component/ipi_roundtrip/native/targets:0", nat0),
                self.bench("component/ipi_roundtrip/ipi/targets:1", 5, emu)]}
        table = [c for c in components.COMPONENTS if c[0].startswith("IPI")]
        rounds = [components.ratios(results.from_doc(doc(n, 200, 1000)), table)
                  for n in (1200, 700, 2200)]
        row = components.rows(rounds, table, components.COMPONENT_TOL)[0]
        self.assertEqual(["1.00", "0.50-2.00", "pass"], row[3:])
        rounds = [components.ratios(results.from_doc(doc(n, 200, 1000)), table)
                  for n in (700, 700, 2200)]
        self.assertEqual("miss", components.rows(rounds, table, 0.25)[0][-1])
        missing = [components.ratios(results.from_doc({"benchmarks": []}), table)]
        self.assertEqual("no result", components.rows(missing, table, 0.25)[0][-1])


class ComponentGuard(unittest.TestCase):
    """The guard doubles each cost and wants each component to move by the
    cost times the kernel's count of it per operation."""

    def fake_models(self, extra):
        """guard_models() on a model that charges GUARD's counts, plus
        @extra {(benchmark, cost): count} on top."""
        with open(os.path.join(components.PROFILES, components.GUARD_PROFILE + ".json")) as f:
            base = json.load(f)["costs"]

        def flat(table):
            """{key: ns}, a distance table's classes as "name.class"."""
            out = {}
            for k, v in table.items():
                if "ns" in v:
                    out[k] = v["ns"]
                elif isinstance(v, dict):
                    out.update({k + "." + c: cv["ns"] for c, cv in v.items()
                                if isinstance(cv, dict) and "ns" in cv})
            return out

        def models(bench, profile):
            costs = flat(base)
            if profile != components.GUARD_PROFILE:
                with open(profile) as f:
                    costs.update(flat(json.load(f)["costs"]))
            out = {}
            for name, (_, want) in components.GUARD.items():
                counts = dict(want)
                for (n, k), c in extra.items():
                    if n == name:
                        counts[k] = counts.get(k, 0) + c
                out[name] = 1000.0 + sum(c * costs[k] for k, c in counts.items())
            return out
        return models

    def guard_with(self, extra):
        saved = components.guard_models
        components.guard_models = self.fake_models(extra)
        try:
            return components.guard("bench")
        finally:
            components.guard_models = saved

    def test_counts_as_the_kernel_pays_them_pass(self):
        self.assertEqual([], self.guard_with({}))

    def test_a_cost_charged_once_too_often_is_named(self):
        bad = self.guard_with({("tlb_flush2_threads/ipi/lru:global/cpus:1", "pte_update"): 1})
        self.assertEqual(["tlb_flush2_threads/ipi/lru:global/cpus:1: pte_update charged "
                          "5.000 times an operation, not 4"], bad)
        bad = self.guard_with({("component/ipi_roundtrip/ipi/targets:1", "irq_exit"): 1})
        self.assertEqual(1, len(bad))
        self.assertIn("irq_exit charged 1.000 times an operation, not 0", bad[0])
        # A distance class: a handoff charged on both sides of a release.
        bad = self.guard_with({("component/lock_shared/ipi/cpus:2", "lock_handoff.llc"): 1})
        self.assertEqual(["component/lock_shared/ipi/cpus:2: lock_handoff.llc charged "
                          "3.000 times an operation, not 2"], bad)

    def test_a_missing_component_is_named(self):
        saved = components.guard_models
        components.guard_models = lambda bench, profile: {n: None for n in components.GUARD}
        try:
            bad = components.guard("bench")
        finally:
            components.guard_models = saved
        self.assertEqual(len(components.GUARD), len(bad))
        self.assertIn("no model_ns", bad[0])


class Modelled(unittest.TestCase):
    """compare's modelled section: rows beside the patches' figures, verdicts,
    and the guard's checks (no time asserted)."""

    @staticmethod
    def res(entries):
        doc = {"benchmarks": [Model.bench(n, 1000, m) for n, m in entries]}
        return results.from_doc(doc)

    def test_verdict_needs_half_the_gain_of_a_speedup(self):
        self.assertEqual("within", modelled.verdict(1.3, 1.39, speedup=True))
        self.assertTrue(modelled.verdict(1.02, 1.39, speedup=True).startswith("miss (gain"))
        self.assertEqual("within", modelled.verdict(1.02, 1.39))
        self.assertEqual("miss (+100%)", modelled.verdict(2.0, 1.0, speedup=True))
        self.assertEqual("within", modelled.verdict(1.0, 1.0, speedup=True))
        self.assertEqual("-", modelled.verdict(None, 1.0))

    def test_verdict_needs_the_sign_and_half_of_a_small_effect(self):
        # A 7% gain: 0.85x (a loss) and 1.02x (too little) miss; 1.05x is in.
        self.assertEqual("miss (gain -15% of 7%)", modelled.verdict(0.85, 1.07, speedup=True))
        self.assertEqual("miss (gain 2% of 7%)", modelled.verdict(1.02, 1.07, speedup=True))
        self.assertEqual("miss (gain 0% of 7%)", modelled.verdict(1.0, 1.07, speedup=True))
        self.assertEqual("within", modelled.verdict(1.05, 1.07, speedup=True))
        # A loss the patch measured needs a loss of at least half its size.
        self.assertEqual("within", modelled.verdict(0.9, 0.85, speedup=True))
        self.assertTrue(modelled.verdict(1.01, 0.85, speedup=True).startswith("miss (loss"))

    def test_invlpgb_rows_from_model_ns(self):
        base = "tlb_flush2_threads/%s/cpus:36"
        res = self.res([(base % "ipi/lru:global", 68000), (base % "ipi/lru:percpu", 50000),
                        (base % "gbcast/lru:global", 68000), (base % "gbcast/lru:percpu", 31000)])
        rows = modelled.rows_invlpgb(res, reference.load())
        self.assertEqual("529k/s", rows[0][4])          # 36 threads / 68 us
        self.assertEqual(["within"] * 4, [r[5] for r in rows])
        self.assertEqual("1.36x", rows[1][4])

    def test_mrs_rows_take_the_floor_at_64(self):
        res = self.res([("trap_dispatch/locked/threads:1", 3.6e6),
                        ("trap_dispatch/direct/threads:1", 3.1e6),
                        ("trap_dispatch/locked/threads:64", 1.6e8),
                        ("trap_dispatch/direct/threads:64", 3.1e6)])
        rows = modelled.rows_mrs(res, reference.load())
        self.assertEqual(2, len(rows))
        self.assertEqual("within", rows[0][5])
        self.assertTrue(rows[1][5].startswith("within (goal >= 50x)"), rows[1])

    def test_check_names_missing_unmodelled_and_stale(self):
        res = {"skip_broadcast": self.res([("mprotect_threaded/local/cpus:1", 100)]),
               "mrs": self.res([("trap_dispatch/locked/threads:1", None)])}
        want = modelled.message_ns(modelled.profile_costs("milan-36"))
        doc = {"benchmarks": [dict(Model.bench("context_switch/ipi:cpumask=lazy/cpus:36", 10, 5),
                                   violations=2, message_ns_per_side=want + 1)]}
        res["lazy_cpumask"] = results.from_doc(doc)
        bad = "\n".join(modelled.check(res))
        self.assertIn("modelled invlpgb: no result", bad)
        self.assertIn("trap_dispatch/locked/threads:1 has no model_ns", bad)
        self.assertIn("served 2 stale translations", bad)
        self.assertIn("charged %d ns a side of a message, not %d" % (want + 1, want), bad)
        self.assertNotIn("mprotect_threaded/local/cpus:1", bad)

    def test_invlpgb_by_thread_count_below_the_threshold_is_tolerance_alone(self):
        """Below 4 threads the merged kernel sends no INVLPGB, so its 0.97x at
        1 thread is noise: 1.00x modelled is within. From 4 threads on a
        speedup needs its sign and half its gain."""
        def doc(tip, inv):
            return {"benchmarks": [
                Model.bench("tlb_flush2_threads/ipi/lru:percpu/cpus:%d" % n, 1, tip)
                for n in (1, 4)] + [
                Model.bench("tlb_flush2_threads/gbcast/lru:percpu/cpus:%d" % n, 1, inv)
                for n in (1, 4)]}
        ref = reference.load()
        rows = modelled.rows_invlpgb_threads(results.from_doc(doc(1000, 1000)), ref)
        self.assertEqual(["INVLPGB / tip (not used)", "0.97x", "1.00x", "within"],
                         rows[0][2:])
        self.assertTrue(rows[1][5].startswith("miss"))           # 4 threads: 1.00x of 1.60x
        rows = modelled.rows_invlpgb_threads(results.from_doc(doc(1500, 1000)), ref)
        self.assertEqual("within", rows[1][5])                  # 1.50x of 1.60x
        c = modelled.curve(results.from_doc(doc(1000, 500)), ref)
        self.assertEqual([1, 2, 4, 8, 16, 32], c["threads"])
        self.assertEqual([1e6, None, 8e6 / 2, None, None, None][:3], c["modelled"]["tip"][:3])

    def test_report_lists_the_fitted_parameters(self):
        lines, rows = modelled.report({}, 0)
        text = "\n".join(lines)
        self.assertIn("thunderx2-64-vm ipi_delivery: fitted", text)
        self.assertTrue(all(len(r) == 7 for r in rows))

    def test_a_row_that_moves_with_the_run_length_is_not_within(self):
        full = [["p", "prof", "m", "1.39x", "1.30x", "within"],
                ["p", "prof", "m2", "2.00x", "1.00x", "miss (-50%)"],
                ["p", "prof", "m3", "1.50x", "1.45x", "within"]]
        half = [["p", "prof", "m", "1.39x", "1.20x", "within"],
                ["p", "prof", "m2", "2.00x", "1.20x", "miss (-40%)"],
                ["p", "prof", "m3", "1.50x", "1.45x", "within"]]
        rows = modelled.with_half(full, half)
        self.assertEqual(["p", "prof", "m", "1.39x", "1.30x", "1.20x",
                          "not within (moves with the run's length)"], rows[0])
        self.assertEqual("miss (-50%) (moves with the run's length)", rows[1][6])
        self.assertEqual("within", rows[2][6])
        # A row with no half run (a whole run of the source's length) says
        # n/a and keeps its verdict.
        none = modelled.with_half([full[0]], [["p", "prof", "m", "1.39x", "-", "-"]])
        self.assertEqual(["n/a", "within"], none[0][5:])
        run = {"key": "mrs", "args": ["--sd_trap_reads=5000", "--sd_other=3"]}
        h = modelled.half_run(run)
        self.assertEqual(["--sd_trap_reads=2500", "--sd_other=3"], h["args"])
        self.assertEqual("modelled-mrs-half.json", modelled.run_file(h))
        self.assertEqual(modelled.HALF + "mrs", h["key"])


class Handshakes(unittest.TestCase):
    @staticmethod
    def result(ns, reached=1.0, targets=7.0, errors=()):
        return {"real_ns": [ns], "cpu_ns": [ns], "iterations": [100], "errors": list(errors),
                "counters": {"handshake_ns": [ns], "reached": [reached],
                             "targets": [targets], "refusals": [0.0]}}

    def test_a_cell_says_time_and_reached_and_whether_it_moved(self):
        text, doc = handshakes.cell([self.result(1700.0), self.result(1705.0)])
        self.assertEqual("1.70 us 7/7", text)
        self.assertFalse(doc["moved"])
        text, doc = handshakes.cell([self.result(2790.0, reached=1 / 7.0),
                                     self.result(3285.0, reached=0.5)])
        self.assertEqual("2.79 us 1/7 ?", text)
        self.assertTrue(doc["moved"])

    def test_a_refused_or_missing_cell_is_na(self):
        self.assertEqual("n/a", handshakes.cell(None)[0])
        self.assertEqual("n/a", handshakes.cell([self.result(1.0, errors=["refused"])])[0])

    def test_the_report_leaves_out_rows_a_profile_refused_everywhere(self):
        res = {"milan-36": {handshakes.name("poll", "ipi", 8): [self.result(1400.0)]}}
        lines, doc = handshakes.report(res)
        self.assertTrue(any(l.strip().startswith("poll/ipi") for l in lines))
        self.assertFalse(any("mprotect/broadcast" in l for l in lines))
        self.assertIn(handshakes.name("poll", "ipi", 8), doc["milan-36"])


class Mechanisms(unittest.TestCase):
    @staticmethod
    def result(ns, **counters):
        return {"real_ns": [ns], "cpu_ns": [ns], "iterations": [10], "errors": [],
                "counters": dict({"model_ns": [ns]}, **{k: [v] for k, v in counters.items()})}

    def test_every_row_reads_a_run_of_its_own_or_the_modelled_sections(self):
        runs = {r["key"] for r in mechanisms.RUNS}
        for row in mechanisms.ROWS:
            self.assertTrue(row["run"] in runs or row["run"] in {r["key"] for r in modelled.RUNS},
                            row["mechanism"])
            # Both strategies of a row must be in its run's filter.
            if row["run"] in runs:
                filt = next(r["filter"] for r in mechanisms.RUNS if r["key"] == row["run"])
                for s in (row["strategy"], row["baseline"]):
                    self.assertRegex(row["name"] % (s, row["cpus"][-1]) + "/", filt)

    def test_a_speedup_is_the_baseline_over_the_mechanism(self):
        res = {"rar": {"tlb_flush2_threads/ipi/lru:percpu/cpus:8": self.result(10000.0),
                       "tlb_flush2_threads/rar/lru:percpu/cpus:8": self.result(8000.0)}}
        rows = mechanisms.rows(res, {}, reference.load())
        rar8 = next(r for r in rows if r[0] == "Intel RAR" and r[1].endswith(", 8"))
        self.assertEqual("1.25x", rar8[5])
        # A row whose run is missing says so, not a number.
        rar2 = next(r for r in rows if r[0] == "Intel RAR" and r[1].endswith(", 2"))
        self.assertEqual("-", rar2[5])

    def test_a_bystander_row_is_its_slowdown_and_stall(self):
        res = {"bystander_x86": {"bystander/gbcast/flushers:4/bystanders:2":
                                 self.result(1.0, bystander_slowdown=0.004,
                                             bystander_stall_ns=79.0)}}
        rows = {r[0]: r for r in mechanisms.bystander_rows(res)}
        self.assertEqual(["gbcast", "milan-36", "0.4%", "79 ns"], rows["gbcast"])
        self.assertEqual("-", rows["ipi"][2])


if __name__ == "__main__":
    unittest.main()
