# SPDX-License-Identifier: MIT
"""Benchmark names: parsed and built in one place.

A name is <workload>/<strategy spec>/<key>:<value>/... . The strategy spec
keeps its own options (ipi:cpumask=lazy, gbcast:threshold=0); every later
path element is a key:value parameter: lru:global, cpus:4, threads:8,
pages:511, remote:busy, flush_every:250. Workloads that vary the LRU lock put
lru:<global|percpu> before cpus:<n> (tlb_flush2_threads/ipi/lru:global/cpus:2);
the others have no lru element. Google Benchmark's own suffixes
(/real_time, /iterations:N, ...) are stripped before anything else.
"""
import collections
import re

# No benchmark uses Google Benchmark's ->Threads(), so "/threads:T" is part
# of a name (trap_dispatch) and is kept.
GB_SUFFIX = re.compile(r"/(real_time|manual_time|process_time|iterations:\d+|repeats:\d+|"
                       r"min_time:[0-9.]+)$")
AGGREGATE = re.compile(r"_(mean|median|stddev|cv)$")


def base_name(name):
    """Strip the suffixes Google Benchmark appends (/real_time, /iterations:N, ...)."""
    prev = None
    while prev != name:
        prev, name = name, GB_SUFFIX.sub("", name)
    return name


class Name(collections.namedtuple("Name", "workload strategy params")):
    """@params: the key:value elements after the strategy, in order (a dict)."""

    @property
    def kind(self):
        """The name of the strategy without its options (ipi for ipi:cpumask=lazy)."""
        return (self.strategy or "").split(":", 1)[0]

    @property
    def options(self):
        """The strategy's own options: {"cpumask": "lazy"} for ipi:cpumask=lazy."""
        _, _, opts = (self.strategy or "").partition(":")
        return dict(o.partition("=")[::2] for o in opts.split(",") if o)

    def count(self):
        """(key, n) of the CPU or thread count, or (None, None)."""
        for key in ("cpus", "threads"):
            if key in self.params:
                return key, int(self.params[key])
        return None, None

    @property
    def variant(self):
        """What a table row or plot line names: the strategy and its LRU lock."""
        return with_lru(self.strategy, self.params.get("lru"))


def parse(name):
    """A Name for @name (Google Benchmark suffixes stripped). Elements after
    the strategy that are not key:value go into params under their position."""
    parts = base_name(name).split("/")
    params = collections.OrderedDict()
    for i, part in enumerate(parts[2:], 2):
        key, sep, value = part.partition(":")
        if sep:
            params[key] = value
        else:
            params[str(i)] = part
    return Name(parts[0], parts[1] if len(parts) > 1 else None, params)


def build(workload, variant, n=None, count="cpus", **after):
    """The name of @workload run with @variant (a strategy spec, with
    "/lru:..." where the workload varies the lock) on @n CPUs (or threads,
    @count="threads"), then the @after elements in order."""
    parts = [workload, variant]
    if n is not None:
        parts.append("%s:%d" % (count, n))
    parts += ["%s:%s" % kv for kv in after.items()]
    return "/".join(parts)


# Workloads whose names carry the LRU lock, and its default (the machine's
# SD_LRU_PERCPU): a default run may be named with or without lru:percpu.
LRU_WORKLOADS = ("tlb_flush2_threads", "tlb_flush2_processes")
DEFAULT_LRU = "percpu"


def join(p):
    """The name of Name @p (the inverse of parse() for key:value elements)."""
    return "/".join([p.workload, p.strategy] +
                    [v if k.isdigit() else "%s:%s" % (k, v) for k, v in p.params.items()])


def default_lru_alias(name):
    """@name spelled the other way for a default-LRU run (lru:percpu added
    before the count, or taken out), or None when there is no other way."""
    p = parse(name)
    if p.workload not in LRU_WORKLOADS or p.params.get("lru", DEFAULT_LRU) != DEFAULT_LRU:
        return None
    params = collections.OrderedDict((k, v) for k, v in p.params.items() if k != "lru")
    if "lru" not in p.params:
        params = collections.OrderedDict([("lru", DEFAULT_LRU)] + list(params.items()))
    return join(p._replace(params=params))


def with_lru(strategy, lru):
    """The variant of @strategy under the global or per-CPU LRU lock."""
    return strategy if lru is None else "%s/lru:%s" % (strategy, lru)
