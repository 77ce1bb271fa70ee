#!/usr/bin/env python3
"""What the suite skipped, and why (Note [Skipped tests are counted] in tests/test_main.cpp).

    skip_report.py BUILD_DIR JUNIT_XML RECORD_DIR [--strict]

Lists, after a ctest run:
  - every ctest entry that did not run (skipped: exit 77; disabled), with the reason its
    output gave (the last line saying SKIPPED/skipped, else its last line);
  - every GoogleTest case that skipped inside an entry that ran (RECORD_DIR/*.tsv, written by
    tests/test_main.cpp), except those skipped for their rank count that ran at another rank
    count of the same binary; one that ran at none is an error where another rank count's
    entry ran (a filtered run, ctest -R, may leave it out: then it is a note).
Tests labelled "gpu" (ctest -L gpu) are listed apart. With --strict (CI, where
scripts/setup.sh installs every optional dependency) any other skip fails: exit 1.
"""
import collections
import glob
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

RANK_COUNT = "[rank count] "


def gpu_tests(build_dir):
    listing = subprocess.run(["ctest", "-N", "-L", "gpu"], cwd=build_dir, capture_output=True,
                             text=True, check=True).stdout
    return set(re.findall(r"Test\s+#\d+: (\S+)", listing))


def reason_from_output(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if "skip" in line.lower():
            return line
    return lines[-1] if lines else "(no output)"


def ctest_entries(junit):
    """Entry name -> status ("run", "fail", "notrun", "disabled")."""
    return {case.get("name"): case.get("status", "") for case in ET.parse(junit).getroot().iter("testcase")}


def ctest_skips(junit):
    skips = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        status = case.get("status", "")
        skipped = case.find("skipped")
        if status not in ("notrun", "disabled") and skipped is None:
            continue
        if status == "disabled" or (skipped is not None and skipped.get("message") == "Disabled"):
            reason = "disabled (DISABLED property)"
        else:
            out = case.find("system-out")
            reason = reason_from_output(out.text if out is not None else "")
            if reason == "(no output)" and skipped is not None and skipped.get("message"):
                reason = skipped.get("message")
        skips.append((case.get("name"), reason))
    return skips


def gtest_skips(record_dir):
    """(program, test) -> {ranks: (status, reason)} from tests/test_main.cpp's records."""
    outcomes = collections.defaultdict(dict)
    for path in glob.glob(os.path.join(record_dir, "*.tsv")):
        program, ranks = re.match(r"(.+)\.np(\d+)\.tsv$", os.path.basename(path)).groups()
        with open(path, encoding="utf-8") as f:
            for line in f:
                status, test, reason = (line.rstrip("\n").split("\t") + ["", ""])[:3]
                previous = outcomes[(program, test)].get(int(ranks))
                # An entry run twice (two ctest entries of one binary) counts as ran if it ran once.
                if previous is None or previous[0] == "skipped":
                    outcomes[(program, test)][int(ranks)] = (status, reason)
    return outcomes


def main():
    args = [a for a in sys.argv[1:] if a != "--strict"]
    strict = "--strict" in sys.argv[1:]
    build_dir, junit, record_dir = args
    gpu = gpu_tests(build_dir)
    gpu_programs = {re.sub(r"_np\d+$", "", name) for name in gpu}
    entries = ctest_entries(junit)
    listed, gpu_listed, errors, notes = [], [], [], []
    for name, reason in ctest_skips(junit):
        (gpu_listed if name in gpu else listed).append(f"{name}: {reason}")
    for (program, test), by_ranks in sorted(gtest_skips(record_dir).items()):
        ran_at = sorted(n for n, (status, _) in by_ranks.items() if status == "ran")
        for ranks, (status, reason) in sorted(by_ranks.items()):
            if status != "skipped":
                continue
            where = f"{program}{'' if ranks == 1 else f'_np{ranks}'} {test}"
            if reason.startswith(RANK_COUNT):
                if not ran_at:
                    why = f"{where}: skipped for its rank count ({reason[len(RANK_COUNT):]})"
                    others = [name for name, status in entries.items() if status == "run" and
                              re.fullmatch(re.escape(program) + r"(_np\d+)?", name) and
                              name != (program if ranks == 1 else f"{program}_np{ranks}")]
                    if others:
                        errors.append(f"{why} and ran at no other ({', '.join(sorted(others))} passed)")
                    else:
                        notes.append(f"{why}; no other rank count of it ran here (a filtered run?)")
                continue
            (gpu_listed if program in gpu_programs else listed).append(f"{where}: {reason}")
    print("== skipped tests")
    for line in gpu_listed:
        print(f"  [gpu] {line}")
    for line in listed:
        print(f"  {line}")
    if not gpu_listed and not listed:
        print("  none")
    for line in notes:
        print(f"  note: {line}")
    for line in errors:
        print(f"  ERROR {line}")
    if errors:
        return 1
    if strict and listed:
        print(f"skip report: {len(listed)} non-GPU test(s) skipped; in CI every optional "
              "dependency is installed, so each is a failure")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
