#!/usr/bin/env python3
"""Counts test cases from the JUnit XML every PRISM test writes, prints
`N passed, N failed[, N skipped]` as the last line, exits 1 if any failed.

usage: summary.py BUILD_DIR [BUILD_DIR...]
Each BUILD_DIR holds test-results/*.xml and meson-logs/testlog.json. A test
program that meson saw fail but whose XML shows no failure (a crash, a
timeout, a sanitizer abort, a missing file) counts as one more failure.
"""
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

passed = failed = skipped = 0


def count(build: Path, tag: str) -> None:
    global passed, failed, skipped
    xml_failed = set()
    for f in sorted((build / "test-results").glob("*.xml")):
        try:
            root = ET.parse(f).getroot()
        except ET.ParseError:
            print(f"FAILED {f.stem}{tag}: unreadable XML")
            failed += 1
            xml_failed.add(f.stem.removeprefix("py_"))
            continue
        for case in root.iter("testcase"):
            tags = {child.tag for child in case}
            if "failure" in tags or "error" in tags:
                failed += 1
                xml_failed.add(f.stem.removeprefix("py_"))
                print(f"FAILED {f.stem}{tag}: {case.get('classname', '')}.{case.get('name')}")
            elif "skipped" in tags or case.get("result") == "skipped" or case.get("status") == "notrun":
                skipped += 1
            else:
                passed += 1
    log = build / "meson-logs" / "testlog.json"
    if log.exists():
        for line in log.read_text().splitlines():
            t = json.loads(line)
            name, result = t["name"].split(":")[-1].strip().split(" ")[-1], t["result"]
            if result not in ("OK", "SKIP", "EXPECTEDFAIL") and name not in xml_failed:
                print(f"FAILED {name}{tag}: meson reports {result} and its XML shows no failure")
                failed += 1


for i, b in enumerate(sys.argv[1:]):
    build = Path(b)
    count(build, "" if i == 0 else f" [{build.name}]")

line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed else 0)
