# SPDX-License-Identifier: MIT
"""Google Benchmark JSON: iterations by base name, medians over repetitions."""
import json
import statistics

from . import names

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
# Numeric fields Google Benchmark writes itself; every other number is a counter.
GB_FIELDS = {"real_time", "cpu_time", "iterations", "repetitions", "repetition_index",
             "threads", "family_index", "per_family_instance_index"}


class ByName(dict):
    """Results keyed by benchmark name that also find a default-LRU run under
    its other spelling (tlb_flush2_threads/ipi/cpus:2 for
    tlb_flush2_threads/ipi/lru:percpu/cpus:2, and back): which one the
    benchmark uses is its business, the reports ask for either."""

    def _key(self, name):
        if dict.__contains__(self, name):
            return name
        alias = names.default_lru_alias(name)
        return alias if alias is not None and dict.__contains__(self, alias) else None

    def get(self, name, default=None):
        key = self._key(name)
        return default if key is None else self[key]

    def __contains__(self, name):
        return self._key(name) is not None


def load(path):
    """(context, results) of the JSON file at @path; see from_doc()."""
    with open(path) as f:
        doc = json.load(f)
    return doc.get("context", {}), from_doc(doc)


def from_doc(doc):
    """name -> {"real_ns": [..], "cpu_ns": [..], "iterations": [..],
    "counters": {k: [..]}, "errors": [..]}, a value per repetition; aggregates
    (mean, median, ...) are left out, medians are taken here."""
    out = ByName()
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = names.base_name(b.get("run_name") or b["name"])
        r = out.setdefault(name, {"real_ns": [], "cpu_ns": [], "iterations": [],
                                  "counters": {}, "errors": []})
        if b.get("error_occurred"):
            r["errors"].append(b.get("error_message", "error"))
            continue
        scale = UNIT_NS.get(b.get("time_unit", "ns"), 1.0)
        r["real_ns"].append(b["real_time"] * scale)
        r["cpu_ns"].append(b["cpu_time"] * scale)
        r["iterations"].append(b["iterations"])
        for k, v in b.items():
            if k not in GB_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool):
                r["counters"].setdefault(k, []).append(v)
    return out


def median(values):
    """The median of the values that are not None, or None."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def med(r, counter=None):
    """Median real time in ns (or of @counter) of one result, None if absent."""
    if not r:
        return None
    return median(r["real_ns"] if counter is None else r["counters"].get(counter, []))


def one_run(res):
    """A run's results as scalars (medians of its repetitions): name ->
    {real_ns, cpu_ns, iterations, counters} or {"error": message}."""
    out = ByName()
    for name, r in res.items():
        if not r["real_ns"]:
            out[name] = {"error": r["errors"][0] if r["errors"] else "no result"}
            continue
        out[name] = {"real_ns": median(r["real_ns"]), "cpu_ns": median(r["cpu_ns"]),
                     "iterations": median(r["iterations"]),
                     "counters": {k: median(v) for k, v in r["counters"].items()}}
    return out
