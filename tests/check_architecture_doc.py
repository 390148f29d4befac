"""docs/architecture.md's target graph against the CMake files: every kvrl target and
every link between two kvrl targets declared in common/, actor/, learner/ and launch/ must
be in the doc's edge list, and nothing else.

    python tests/check_architecture_doc.py [ROOT]
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
FOLDERS = ["common", "actor", "learner", "launch"]
ALIASES = {"kvrl::common": "kvrl_common", "kvrl::actor": "kvrl_actor", "kvrl::learner": "kvrl_learner"}


def cmake_files():
    for folder in FOLDERS:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            if "CMakeLists.txt" in files:
                yield os.path.join(directory, "CMakeLists.txt")


def kvrl_name(word):
    word = ALIASES.get(word, word)
    return word if word == "kvrl" or word.startswith("kvrl_") else None


def cmake_graph():
    targets, edges = set(), set()
    for path in cmake_files():
        text = re.sub(r"#.*", "", open(path).read())
        for name in re.findall(r"\b(?:add_library|add_executable|kvrl_library)\(\s*([\w:]+)", text):
            if "::" not in name:
                targets.add(name)
        for body in re.findall(r"target_link_libraries\(([^)]*)\)", text):
            words = body.split()
            source = words[0]
            for word in words[1:]:
                target = kvrl_name(word)
                if target:
                    edges.add((source, target))
    return targets, edges


def doc_graph():
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    block = re.search(r"<!-- target graph: checked by tests/check_architecture_doc.py -->\s*```text\n(.*?)```", text, re.S)
    if not block:
        sys.exit("docs/architecture.md has no target graph block")
    targets, edges = set(), set()
    for line in block.group(1).splitlines():
        if "->" not in line:
            continue
        source, links = line.split("->")
        source = source.split()[0]
        targets.add(source)
        for target in links.split():
            targets.add(target)
            edges.add((source, target))
    return targets, edges


def main():
    cmake_targets, cmake_edges = cmake_graph()
    doc_targets, doc_edges = doc_graph()
    problems = []
    for name in sorted(cmake_targets - doc_targets):
        problems.append(f"target {name} is in CMake but not in the doc's graph")
    for name in sorted(doc_targets - cmake_targets):
        problems.append(f"target {name} is in the doc's graph but not in CMake")
    for source, target in sorted(cmake_edges - doc_edges):
        problems.append(f"CMake links {source} -> {target}; the doc's graph does not")
    for source, target in sorted(doc_edges - cmake_edges):
        problems.append(f"the doc's graph has {source} -> {target}; CMake does not link it")
    if problems:
        sys.exit("docs/architecture.md is out of date:\n  " + "\n  ".join(problems))
    print(f"docs/architecture.md matches CMake: {len(cmake_targets)} targets, {len(cmake_edges)} links")


if __name__ == "__main__":
    main()
