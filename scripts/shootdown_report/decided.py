# SPDX-License-Identifier: MIT
"""What decides each modelled row, as scripts/what-if --decides wrote it
(decides.json): read here for scripts/compare, which must not depend on
the what-if machinery that writes it (whatif.py)."""
import hashlib
import json
import os

from . import ROOT

DECIDES = os.path.join(ROOT, "scripts", "shootdown_report", "decides.json")

def profile_path(name):
    return os.path.join(ROOT, "profiles", name + ".json")


def profile_hash(name):
    with open(profile_path(name), "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


def decided_lines(rows):
    """Lines for scripts/compare: what decides each modelled row, from
    decides.json, or why that is not known."""
    if not os.path.exists(DECIDES):
        return ["what decides each row: not computed (scripts/what-if --decides)"]
    with open(DECIDES) as f:
        doc = json.load(f)
    out = ["what decides each row (the three parameters whose change by +-50%% moves it most; "
           "* an estimate; scripts/what-if --decides at %s, %s):" % (doc.get("commit", "?"),
                                                                    doc.get("date", "?"))]
    stale = {p for p, h in doc.get("profiles", {}).items()
             if os.path.exists(profile_path(p)) and profile_hash(p) != h}
    for key, r in sorted(doc.get("rows", {}).items()):
        tops = ", ".join("%s%s %.3g..%.3g" % (t["param"], "*" if t["estimate"] else "",
                                              t["at_half"], t["at_one_and_a_half"])
                         for t in r["top"])
        out.append("  %-58s %s%s" % (r["measure"][:58], tops,
                                     "  (stale: %s changed since)" % r["profile"]
                                     if r["profile"] in stale else ""))
    return out
