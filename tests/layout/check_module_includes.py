#!/usr/bin/env python3
"""Fails when a production module reaches into another module's private sources, or a role of
actors/ into another role's folder.

A module's private headers sit in <module>/src; other modules see only <module>/include. Two ways
to bypass that are checked: a CMakeLists.txt adding another module's src/ to an include path, and a
source file including a path that climbs out of its module ("../../actors/src/x.hpp"). Tests and
benchmarks are white-box and may read a module's src/ (tests/, bench/ are not checked).

Inside actors/src, each folder is a role (master/, ps/, worker/) or the node process (node/), and
the headers at the top of actors/src are the interfaces between them (node_context.hpp,
worker_host.hpp, roles.hpp, caf_types.hpp). A file of a folder includes its own folder's files,
the interfaces and public headers, never another folder's file; an interface includes only
interfaces (and public headers). So the roles meet only through the interfaces, and a role's
folder with the interfaces is all there is to read about it.
"""
import os
import re
import sys

MODULES = ["core", "nn", "gpu", "storage", "transport", "collective", "observe", "supervision",
           "cluster", "wire", "job", "model", "actors", "control", "serve", "apps"]


def main(root):
    problems = []
    src_ref = re.compile(r"\$\{(?:PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR)\}/(\w+)/src")
    include = re.compile(r'#\s*include\s+"([^"]+)"')
    for module in MODULES:
        base = os.path.abspath(os.path.join(root, module))
        for dirpath, _, files in os.walk(base):
            for name in files:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.abspath(root))
                if name == "CMakeLists.txt" or name.endswith(".cmake"):
                    for n, line in enumerate(open(path, encoding="utf-8"), 1):
                        for other in src_ref.findall(line):
                            if other != module:
                                problems.append(f"{rel}:{n}: adds {other}/src to an include path")
                elif name.endswith((".cpp", ".hpp", ".cu", ".cuh")):
                    for n, line in enumerate(open(path, encoding="utf-8"), 1):
                        m = include.search(line)
                        if not m or not m.group(1).startswith(".."):
                            continue
                        target = os.path.normpath(os.path.join(dirpath, m.group(1)))
                        if not target.startswith(base + os.sep):
                            problems.append(f"{rel}:{n}: includes {m.group(1)}, outside module {module}/")
    roles = check_roles(root)
    for p in problems + roles:
        print(p)
    print(f"{len(MODULES)} modules checked: {len(problems)} include(s) into another module's private sources")
    print(f"actors/src checked: {len(roles)} include(s) into another role's folder")
    return 1 if problems or roles else 0


def check_roles(root):
    """Includes from one folder of actors/src into another (see the docstring)."""
    src = os.path.abspath(os.path.join(root, "actors", "src"))
    include = re.compile(r'#\s*include\s+"([^"]+)"')
    problems = []

    def folder_of(path):  # "" for an interface at the top of actors/src
        rel = os.path.relpath(path, src)
        return rel.split(os.sep)[0] if os.sep in rel else ""

    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith((".cpp", ".hpp", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            mine = folder_of(path)
            for n, line in enumerate(open(path, encoding="utf-8"), 1):
                m = include.search(line)
                if not m:
                    continue
                # As the compiler looks: next to the file, then in actors/src (its include path).
                target = None
                for base in (dirpath, src):
                    candidate = os.path.normpath(os.path.join(base, m.group(1)))
                    if os.path.isfile(candidate) and candidate.startswith(src + os.sep):
                        target = candidate
                        break
                if target is None:
                    continue  # a public header or a generated one
                theirs = folder_of(target)
                if theirs == mine or theirs == "":
                    continue
                rel = os.path.relpath(path, os.path.abspath(root))
                where = f"the {mine}/ folder" if mine else "an interface"
                problems.append(f"{rel}:{n}: {where} includes {theirs}/{os.path.basename(target)}: "
                                f"roles meet through the interfaces at the top of actors/src")
    return problems


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")))
