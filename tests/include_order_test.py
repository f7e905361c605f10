#!/usr/bin/env python3
"""The folders of include/sar in their written order (README's "Layout"): a header includes
headers of its own folder and of folders on lower levels only, and no header includes itself
through others; and core/ includes nothing outside the standard library, the system's headers,
Eigen, oneTBB and Random123 (header-only), so it builds without the optional libraries that
io/ (zlib, nlohmann-json) and the upper folders bring. Fails naming every include that breaks
the order, every cycle and every outside include of core/.

usage: include_order_test.py INCLUDE_DIR   (the include/ directory; run by meson test)
"""
import os
import re
import sys

# Level by level from the bottom; a folder may include its own and lower levels' folders.
# "." is the top: the umbrella header sar.hpp and version.hpp.
LEVELS = [
    ["core"],
    ["io"],
    ["graph", "comm"],
    ["kernels", "partition"],
    ["schedule"],
    ["nn", "distributed"],
    ["optim", "testing", "sampling"],
    ["train"],
    ["."],
]
level_of = {folder: level for level, folders in enumerate(LEVELS) for folder in folders}

root = os.path.join(sys.argv[1], "sar")
includes = {}  # header (relative to root) -> the sar headers it includes
outside = {}   # header -> its <...> includes
for directory, _, files in os.walk(root):
    for name in files:
        path = os.path.join(directory, name)
        header = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        includes[header] = re.findall(r'^\s*#\s*include\s+"sar/([^"]+)"', text, re.M)
        outside[header] = re.findall(r'^\s*#\s*include\s+<([^>]+)>', text, re.M)


def folder(header):
    return header.split("/")[0] if "/" in header else "."


problems = []
for header, targets in sorted(includes.items()):
    if folder(header) not in level_of:
        problems.append(f"{header}: folder '{folder(header)}' has no place in LEVELS")
        continue
    for target in targets:
        if target not in includes:
            problems.append(f"{header}: includes sar/{target}, which does not exist")
        elif folder(target) != folder(header) and (
                folder(target) not in level_of or
                level_of[folder(target)] >= level_of[folder(header)]):
            problems.append(f"{header}: includes sar/{target}, a folder not below "
                            f"'{folder(header)}'")

# Cycles between files (a depth-first search; each cycle reported once, by its first file).
state, stack, cycles = {}, [], set()


def visit(header):
    state[header] = "open"
    stack.append(header)
    for target in includes.get(header, []):
        if state.get(target) == "open":
            cycle = stack[stack.index(target):]
            start = cycle.index(min(cycle))
            cycles.add(" -> ".join(cycle[start:] + cycle[:start] + [min(cycle)]))
        elif target in includes and target not in state:
            visit(target)
    stack.pop()
    state[header] = "done"


sys.setrecursionlimit(10000)
for header in sorted(includes):
    if header not in state:
        visit(header)
problems += [f"include cycle: {c}" for c in sorted(cycles)]

# core/'s outside includes: the C++ standard library (no extension), POSIX and the compiler's
# intrinsics, Eigen, oneTBB, Random123.
CORE_MAY_INCLUDE = re.compile(r"^([a-z_]+|sys/[a-z_]+\.h|(Eigen|tbb|oneapi/tbb|Random123)/.+)$")
SYSTEM_HEADERS = {"unistd.h", "fcntl.h", "signal.h", "stdio.h", "errno.h", "sched.h",
                  "pthread.h", "immintrin.h", "x86intrin.h"}
for header, targets in sorted(outside.items()):
    if folder(header) == "core":
        problems += [f"{header}: includes <{t}>, outside what core/ may need"
                     for t in targets if not CORE_MAY_INCLUDE.match(t) and t not in SYSTEM_HEADERS]

for p in problems:
    print("FAIL", p)
print(f"{len(includes)} headers, {sum(len(t) for t in includes.values())} includes checked")
print(f"{0 if problems else 1} passed, {1 if problems else 0} failed")
sys.exit(1 if problems else 0)
