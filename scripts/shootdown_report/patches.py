# SPDX-License-Identifier: MIT
"""The kernel patches the reports reproduce, described once.

Each patch: its key (the modelled section's runs, decides.json and
scripts/what-if name it by this), the title README.md and BENCHMARKS.md give
it, the short label of its modelled rows, the profile of the machine it was
measured on (None: not modelled), the workloads (bench families) that
reproduce it, and the tables of reference.json that hold its published
figures, all of one source. compare's measured blocks, the modelled
section, the plots and what-if read these; test_report.py checks that they
agree with reference.json.
"""

PATCHES = [
    {"key": "skip_broadcast", "label": "skip broadcast",
     "title": 'arm64 "skip tlbi broadcast" (Arcangeli)',
     "profile": "ampere-emag-32", "cpus": "32 CPUs",
     "workloads": ["mprotect_threaded", "process_churn"],
     "source": "skip_broadcast", "figures": ["mprotect_threaded"]},
    {"key": "mrs", "label": "MRS rework",
     "title": "arm64: rework EL0 MRS emulation (Rutland)",
     "profile": "thunderx2-64-vm", "cpus": "1 to 64 threads",
     "workloads": ["trap_dispatch"],
     "source": "mrs_rework", "figures": ["trap_dispatch"]},
    {"key": "lazy_cpumask", "label": "lazy mm_cpumask",
     "title": "x86/mm/tlb: Update mm_cpumask lazily (van Riel)",
     "profile": "milan-36", "cpus": "36 CPUs",
     "workloads": ["context_switch", "forked_worker"],
     "source": "lazy_cpumask", "figures": ["hackbench"]},
    {"key": "invlpgb", "label": "INVLPGB",
     "title": "AMD broadcast TLB invalidation (van Riel)",
     "profile": "milan-36", "cpus": "36 threads",
     "workloads": ["tlb_flush2_threads"],
     "source": "invlpgb_cover", "figures": ["tlb_flush2_threads"]},
    {"key": "invlpgb_threads", "label": "INVLPGB merged",
     "title": "AMD broadcast TLB invalidation, as merged (van Riel)",
     "profile": "milan-36", "cpus": "1 to 32 threads",
     "workloads": ["tlb_flush2_threads"],
     "source": "invlpgb_merged", "figures": ["tlb_flush2_threads_merged"]},
    {"key": "range_tlbi", "label": "range TLBI",
     "title": "arm64 range TLBI decomposition (Roberts)",
     "profile": None, "cpus": "2 CPUs",
     "workloads": ["range_flush"],
     "source": None, "figures": []},
]

BY_KEY = {p["key"]: p for p in PATCHES}


def get(key):
    """The description of patch @key (KeyError for an unknown one)."""
    return BY_KEY[key]


def title(key):
    return BY_KEY[key]["title"]


def label(key):
    return BY_KEY[key]["label"]


def profile(key):
    return BY_KEY[key]["profile"]


def where(key, count=None, unit=None):
    """A modelled row's machine column: "milan-36, 36 threads", or with
    @count and @unit ("CPUs", "threads") that count."""
    p = BY_KEY[key]
    return "%s, %s" % (p["profile"], "%d %s" % (count, unit) if count is not None else p["cpus"])


def of_workload(workload):
    """The first patch a workload reproduces, or None."""
    for p in PATCHES:
        if workload in p["workloads"]:
            return p
    return None
