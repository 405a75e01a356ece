# SPDX-License-Identifier: MIT
"""The kernel patches' published figures, from reference.json beside this file.

Each table there names its source (patch title or mailing-list thread, the
machine, the unit); the code keeps no figure of its own.
"""
import json
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.json")


def load(path=PATH):
    with open(path) as f:
        return json.load(f)


def by_count(table):
    """A table's "threads" entries keyed by int: {1: [...], 2: [...]}."""
    return {int(n): v for n, v in table["threads"].items()}


def source_line(ref, table):
    """Where @table's figures come from, in one line."""
    src = ref["sources"][table["source"]]
    return "%s (%s; %s)" % (src["title"], src["author"], src["machine"])
