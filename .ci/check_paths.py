#!/usr/bin/env python3
"""Style gate: the repository holds everything its build, tests, benchmarks and scripts read.

    .ci/check_paths.py [ROOT]      exit 0: nothing names a path outside ROOT; 1: a list

A file fails the gate when it
  - names the folder `shared` beside the checkout (where reference data used to sit: SHARED
    below), or
  - names a path that climbs above the repository root: a relative path with `..` read
    from the file's own folder (a C include, a CMake source, a script's `cd`), or one
    anchored at a known folder: ${CMAKE_SOURCE_DIR}, ${PROJECT_SOURCE_DIR},
    ${sourceDir} (presets) for the root; ${CMAKE_CURRENT_SOURCE_DIR},
    ${CMAKE_CURRENT_LIST_DIR}, $(dirname "$0") and a script's $here for the file's folder.
Paths anchored at anything else ($BUILD, $DIR, a test's temporary folder) are decided at
run time and are not judged. Prose (*.md) may talk about such paths; data files are not read.
A line that must hold such a string as data (a hostile path a test sends) carries the
marker `paths: data` in a comment.
"""
import os
import re
import subprocess
import sys

SHARED = ".." + "/shared"  # spelt in two parts so that this file does not name it
SKIP_SUFFIXES = (".md", ".f32", ".i32", ".png", ".jpg", ".gz", ".bin", ".npy", ".wav")
ROOT_ANCHORS = {"CMAKE_SOURCE_DIR", "PROJECT_SOURCE_DIR", "sourceDir"}
HERE_ANCHORS = {"CMAKE_CURRENT_SOURCE_DIR", "CMAKE_CURRENT_LIST_DIR", "here"}
# a path-like token, with the anchor that stands right before it (if any)
TOKEN = re.compile(r'(?P<anchor>\$\{(?P<braced>\w+)\}|\$\(dirname "?\$(?:0|\{BASH_SOURCE\[0\]\})"?\)'
                   r'|\$(?P<bare>\w+))?(?P<path>[\w.+/-]+)')


def tracked_files(root):
    """The files git tracks or would (not ignored); every file but build/ outside a checkout."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z"],
                             capture_output=True, check=True).stdout
        return [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for top, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not (top == root and d in ("build", ".git"))]
            files += [os.path.relpath(os.path.join(top, n), root) for n in names]
        return files


def inside(root, path):
    real = os.path.normpath(path)
    return real == root or real.startswith(root + os.sep)


def check_line(root, rel, line):
    """The reasons @line of file @rel fails, as strings."""
    if "paths: data" in line:
        return []
    reasons = []
    if SHARED in line:
        reasons.append("names %s (a folder outside the repository)" % SHARED)
    here = os.path.dirname(os.path.join(root, rel))
    for m in TOKEN.finditer(line):
        anchor = m.group("braced") or m.group("bare")
        path = m.group("path")
        if ".." not in path.split("/"):
            continue
        if m.group("anchor") is None:
            if not path.startswith(".."):
                continue  # absolute (a system path) or not a path
            base = here
        elif anchor in ROOT_ANCHORS:
            base = root
        elif anchor in HERE_ANCHORS or anchor is None:  # $(dirname "$0")
            base = here
        else:
            continue
        target = os.path.join(base, path.lstrip("/"))
        if not inside(root, target):
            reasons.append("%s climbs above the repository root" % m.group(0))
    return reasons


def main(argv):
    root = os.path.realpath(argv[1] if len(argv) > 1 else
                            os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    me = os.path.relpath(os.path.abspath(__file__), root)
    failures = []
    for rel in tracked_files(root):
        if rel == me or rel.endswith(SKIP_SUFFIXES) or not os.path.isfile(os.path.join(root, rel)):
            continue
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (UnicodeDecodeError, OSError):
            continue  # not text
        for no, line in enumerate(lines, 1):
            for why in check_line(root, rel, line):
                failures.append("%s:%d: %s" % (rel, no, why))
    for f in failures:
        print(f, file=sys.stderr)
    if failures:
        print("paths: the repository must hold everything it reads (%d line(s) above)"
              % len(failures), file=sys.stderr)
        return 1
    print("paths: nothing names a folder outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
