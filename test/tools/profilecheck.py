# SPDX-License-Identifier: MIT
"""What every machine profile must hold, against the library's own list.

Shared by check-calibrate (the profiles sd-calibrate writes) and
check-profiles (the ones shipped in profiles/). The parameter list is parsed
from lib/time/params.h, so a parameter added there is checked without
editing these scripts: every key present, every ns a finite number >= 0,
every source a non-empty string, the format and topology fields there.
"""
import json
import math
import re
import sys

PROG = "check-profile"


def fail(msg):
    print("%s: FAIL: %s" % (PROG, msg))
    sys.exit(1)

def param_lists(header):
    text = open(header).read()
    def block(name):
        m = re.search(r"#define %s\(X\)(.*?)(?:\n\n|\n/\*|\n#)" % name, text, re.S)
        if not m:
            fail("no %s in %s" % (name, header))
        return re.findall(r'X\(\s*\w+\s*,\s*"(\w+)"', m.group(1))
    dists = re.search(r"#define SD_MODEL_DIST_KEYS\s*\{([^}]*)\}", text)
    if not dists:
        fail("no SD_MODEL_DIST_KEYS in " + header)
    return (block("SD_MODEL_PARAM_LIST"), block("SD_MODEL_DIST_PARAM_LIST"),
            re.findall(r'"(\w+)"', dists.group(1)))

def check_cost(where, c):
    if not isinstance(c, dict):
        fail("%s is not an object" % where)
    ns = c.get("ns")
    if isinstance(ns, bool) or not isinstance(ns, (int, float)) or not math.isfinite(ns) or ns < 0:
        fail("%s: ns %r is not a finite number >= 0" % (where, ns))
    src = c.get("source")
    if not isinstance(src, str) or not src.strip():
        fail("%s: source %r is empty or not a string" % (where, src))

def check_profile(path, name, params, dparams, dists):
    try:
        p = json.load(open(path))
    except (OSError, ValueError) as e:
        fail("%s does not parse: %s" % (path, e))
    if p.get("format") != "shootdown-profile-1":
        fail("%s: format %r" % (path, p.get("format")))
    if p.get("name") != name:
        fail("%s: name %r, expected %r" % (path, p.get("name"), name))
    for f in ("description",):
        if not isinstance(p.get(f), str) or not p[f]:
            fail("%s: no %s" % (path, f))
    topo = p.get("topology", {})
    if not topo.get("synthetic") or not topo.get("source"):
        fail("%s: topology lacks synthetic or source" % path)
    mech = p.get("mechanisms")
    if not isinstance(mech, dict):
        fail("%s: no mechanisms object" % path)
    for k, src in mech.items():
        if k not in ("ipi", "tlbi_broadcast", "invlpgb", "rar", "sbi"):
            fail("%s: unknown mechanism %s" % (path, k))
        if not isinstance(src, str) or not src.strip():
            fail("%s: mechanism %s has no source" % (path, k))
    feats = p.get("features", {})
    for k, f in feats.items():
        if k not in ("range_tlbi", "kpti", "repeat_tlbi", "svinval", "no_asid") or not isinstance(f, dict) or \
                not isinstance(f.get("present"), bool) or not str(f.get("source", "")).strip():
            fail("%s: feature %s wants present (true/false) and a source" % (path, k))
    if "tlbi_broadcast" in mech and not {"range_tlbi", "kpti"} <= set(feats):
        fail("%s: a machine with tlbi_broadcast must state range_tlbi and kpti" % path)
    costs = p.get("costs")
    if not isinstance(costs, dict):
        fail("%s: no costs object" % path)
    for k in params:
        if k not in costs:
            fail("%s: key %s missing" % (path, k))
        check_cost("%s: %s" % (path, k), costs[k])
    for k in dparams:
        if k not in costs:
            fail("%s: key %s missing" % (path, k))
        for d in dists:
            if d not in costs[k]:
                fail("%s: key %s.%s missing" % (path, k, d))
            check_cost("%s: %s.%s" % (path, k, d), costs[k][d])
    extra = set(costs) - set(params) - set(dparams)
    if extra:
        fail("%s: keys not in the parameter list: %s" % (path, sorted(extra)))
    return len(params) + len(dparams) * len(dists)

