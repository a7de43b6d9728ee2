#!/usr/bin/env python3
"""Checks a Grafana dashboard's structure: it parses, every panel has a unique
id, a place on the 24-column grid and (rows aside) Prometheus queries through
the dashboard's data source variable, and no query or legend takes the
training job from the label `job` (Prometheus' scrape job): the series name it
`job_id`. Which metrics the queries name is the e2e test's part
(tests/e2e/deploy_dashboard_test.cc: against live /metrics).

  check_dashboard.py DASHBOARD.json
"""
import json
import re
import sys

# `job` as a label in PromQL (a matcher, by/without, label_values) or in a
# legend ({{job}}).
JOB_LABEL = [
    re.compile(r"[{,]\s*job\s*(=~|!~|!=|=)"),
    re.compile(r"\b(by|without)\s*\([^)]*\bjob\b[^)]*\)"),
    re.compile(r"label_values\([^)]*,\s*job\s*\)"),
    re.compile(r"\{\{\s*job\s*\}\}"),
]


def strings_of(node, keys=("expr", "legendFormat", "query", "definition")):
    """(key, text) of every query-like string in the dashboard."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str) and key in keys:
                yield key, value
            else:
                yield from strings_of(value, keys)
    elif isinstance(node, list):
        for item in node:
            yield from strings_of(item, keys)


def errors_of(dashboard):
    errors = []
    variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        errors.append("no data source variable named datasource")
    if not dashboard.get("uid") or not dashboard.get("title"):
        errors.append("no uid or title")
    ids = set()
    panels = dashboard.get("panels", [])
    if not panels:
        errors.append("no panels")
    for p in panels:
        title = p.get("title", "?")
        if p.get("id") in ids:
            errors.append(f"{title}: id {p.get('id')} is used twice")
        ids.add(p.get("id"))
        grid = p.get("gridPos", {})
        if not (grid.get("w", 0) > 0 and grid.get("x", -1) >= 0 and grid["x"] + grid["w"] <= 24):
            errors.append(f"{title}: gridPos {grid} is off the 24-column grid")
        if p.get("type") == "row":
            continue
        targets = p.get("targets", [])
        if not targets or any(not t.get("expr", "").strip() for t in targets):
            errors.append(f"{title}: a panel without a query")
        for source in [p.get("datasource")] + [t.get("datasource") for t in targets]:
            if source != {"type": "prometheus", "uid": "${datasource}"}:
                errors.append(f"{title}: data source {source} is not ${{datasource}}")
                break
    for key, text in strings_of(dashboard):
        if any(p.search(text) for p in JOB_LABEL):
            errors.append(f"{key} {text!r} uses the label job, which is Prometheus' scrape job; "
                          f"the training job is job_id")
    return errors


def main():
    path = sys.argv[1]
    try:
        with open(path) as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL {path}: {e}")
        return 1
    errors = errors_of(dashboard)
    for e in errors:
        print(f"FAIL {path}: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
