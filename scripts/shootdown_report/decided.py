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


def shown_value(cell):
    """The number a modelled cell shows ("1.26x", "1.1M/s", "83.7%"), None
    if it shows none."""
    text = cell.strip().rstrip("x%").replace("/s", "")
    scale = {"k": 1e3, "M": 1e6}.get(text[-1:], 1)
    try:
        return float(text.rstrip("kM")) * scale
    except ValueError:
        return None


def moved_since(r, rows):
    """The row of decides.json @r moved since it was computed: the table
    now shows a value more than 3% from the one recorded (the model, not
    only the profile, may have changed; 3% leaves room for the cell's
    rounding). The row's modelled value as shown then, or None."""
    for row in rows:
        if "%s: %s" % (row[1], row[2]) != r["measure"]:
            continue
        now, then = shown_value(row[4]), r.get("modelled")
        if now is None or not then:
            return None
        return then if abs(now - then) > 0.03 * abs(then) else None
    return None


def decided_lines(rows):
    """Lines for scripts/compare: what decides each modelled row, from
    decides.json, or why that is not known. A row is marked stale when its
    profile changed since, or its value did."""
    if not os.path.exists(DECIDES):
        return ["what decides each row: not computed (scripts/what-if --decides)"]
    with open(DECIDES) as f:
        doc = json.load(f)
    out = ["what decides each row (the three parameters whose change by +-50%% moves it most; "
           "* an estimate; scripts/what-if --decides at %s, %s):" % (doc.get("commit", "?"),
                                                                    doc.get("date", "?"))]
    hashes = {p: profile_hash(p) for p in doc.get("profiles", {}) if os.path.exists(profile_path(p))}
    for key, r in sorted(doc.get("rows", {}).items()):
        # The row's own profile hash: a run for some patches keeps the
        # others' rows, computed from older profiles.
        was = r.get("profile_hash", doc.get("profiles", {}).get(r["profile"]))
        stale = {r["profile"]} if r["profile"] in hashes and hashes[r["profile"]] != was else set()
        tops = ", ".join("%s%s %.3g..%.3g" % (t["param"], "*" if t["estimate"] else "",
                                              t["at_half"], t["at_one_and_a_half"])
                         for t in r["top"])
        then = moved_since(r, rows)
        note = ("  (stale: %s changed since)" % r["profile"] if r["profile"] in stale else
                "  (stale: the row was %.3g then)" % then if then is not None else "")
        # A run for some patches (--decides PATCH) keeps the others' rows.
        if r.get("commit", doc.get("commit")) != doc.get("commit"):
            note += "  (at %s, %s)" % (r["commit"], r.get("date", "?"))
        out.append("  %-58s %s%s" % (r["measure"][:58], tops, note))
    return out
