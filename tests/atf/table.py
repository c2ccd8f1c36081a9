#!/usr/bin/env python3
"""The table of one release's ATF runs (tests/slurm_atf.sh):
    tests/atf/table.py VERSION RESULTS-DIR TESTS-LIST
reads RESULTS-DIR/VERSION-without/junit.xml and VERSION-with/junit.xml and
prints a Markdown table: each test file, its outcome without and with
gpushare (counts of its test functions), and every function whose outcome
differs, with the first line of what the ATF said."""
import os
import sys
import xml.etree.ElementTree as ET


def outcomes(path):
    """{module: {function: (outcome, message)}} from pytest's junit.xml."""
    result = {}
    if not os.path.isfile(path):
        return None
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[-1]
        name = case.get("name", "")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error"}.get(child.tag, "skipped")
                message = (child.get("message") or "").strip().splitlines()
                message = message[0] if message else ""
                if child.tag == "skipped" and child.get("type") == "pytest.xfail":
                    outcome = "xfail"
                break
        # A teardown error is a second entry of the same function: keep the worse.
        previous = result.setdefault(module, {}).get(name)
        if previous is None or previous[0] == "passed":
            result[module][name] = (outcome, message)
    return result


def summary(cases):
    if cases is None:
        return "not run"
    counts = {}
    for outcome, _ in cases.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    order = ["passed", "failed", "error", "skipped", "xfail"]
    return ", ".join(f"{counts[o]} {o}" for o in order if o in counts)


def main():
    version, results, listing = sys.argv[1:4]
    notes = {}
    with open(listing) as f:
        for line in f:
            words = line.split("#")[0].split()
            if words:
                notes[words[0]] = " ".join(words[1:])
    without = outcomes(f"{results}/{version}-without/junit.xml") or {}
    with_ = outcomes(f"{results}/{version}-with/junit.xml") or {}
    print(f"| test (Slurm {version}) | without gpushare | with gpushare | difference |")
    print("|---|---|---|---|")
    for test in notes:
        a, b = without.get(test), with_.get(test)
        if a is None and b is None:
            continue
        diffs = []
        for name in sorted(set((a or {}).keys()) | set((b or {}).keys())):
            oa = (a or {}).get(name, ("-", ""))
            ob = (b or {}).get(name, ("-", ""))
            if a is not None and b is not None and oa[0] != ob[0]:
                said = ob[1] or oa[1]
                diffs.append(f"`{name}`: {oa[0]} → {ob[0]} ({said[:160]})")
        note = notes[test]
        if note:
            diffs.insert(0, f"the test sets its own {note}: gpushare's is replaced")
        if a is not None and b is not None and not diffs:
            diffs.append("none")
        print(f"| {test} | {summary(a)} | {summary(b)} | {'; '.join(diffs).replace('|', '/')} |")


main()
