#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The repository stands alone: every relative link of its Markdown pages resolves, every page
a Markdown page names in its text (`semantics.md §5`, code blocks included) is in the tree with
that numbered section, and no tracked file points outside the repository.

A link resolves when its target file or folder exists in the tree and, for `page.md#anchor`,
the page has a heading whose GitHub anchor is `anchor`. Web links (http, https, mailto) are
not fetched (CI has no network). A path that climbs out of the repository through a sibling
folder (`../` followed by a folder name, from the root) is an outside reference: a clone has
nothing beside it.

    python3 ci/docs_links.py [--root DIR]     check the tree (exit 1 on a finding)
    python3 ci/docs_links.py --self-test      plant one finding of each kind; each must be found
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# A page named in text: "docs/semantics.md", "semantics.md §5" (a "## 5. ..." heading).
NAMED = re.compile(r"(?<![\w.-])((?:[\w.-]+/)*[\w-]+\.md)\b(?:\s*§\s*(\d+))?")
# Pages the tools write into their output folders (mlarope report, ci/mutation.py): named in the
# docs, never in the tree.
WRITTEN = {"summary.md"}
# A folder beside the checkout, as a path written from the repository root.
OUTSIDE = re.compile(r"\.\./" + "shared" + r"\b")


def tracked_files(root):
    """The files git tracks under root, or every file when root is not a git work tree."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True
        ).stdout.decode()
        return [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for base, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith((".git", "build", "out"))]
            files += [os.path.relpath(os.path.join(base, n), root) for n in names]
        return files


def github_anchor(heading):
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path):
    """Every anchor of a Markdown page (duplicates numbered as GitHub does)."""
    seen, anchors, in_fence = {}, set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            m = None if in_fence else HEADING.match(line)
            if m:
                base = github_anchor(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                anchors.add(base if n == 0 else f"{base}-{n}")
    return anchors


def links_of(path):
    """(line number, target) of every Markdown link outside code fences and inline code."""
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                yield number, m.group(1) or m.group(2)


def broken_links(root, pages):
    """'page:line: why' for every relative link of pages that does not resolve."""
    found, anchor_cache = [], {}
    for page in pages:
        for number, target in links_of(os.path.join(root, page)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: are not fetched
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            full = os.path.join(root, dest)
            where = f"{page}:{number}: link '{target}'"
            if dest.startswith(".."):
                found.append(f"{where} leaves the repository")
            elif not os.path.exists(full):
                found.append(f"{where}: no file {dest}")
            elif anchor and dest.endswith(".md"):
                if dest not in anchor_cache:
                    anchor_cache[dest] = anchors_of(full)
                if anchor not in anchor_cache[dest]:
                    found.append(f"{where}: {dest} has no heading with anchor '#{anchor}'")
    return found


def numbered_sections(path):
    """The numbers of a page's numbered headings ("## 5. Validity" -> "5")."""
    numbers = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = HEADING.match(line)
            if m and re.match(r"\d+[.\s]", m.group(2) + " "):
                numbers.add(re.match(r"\d+", m.group(2)).group(0))
    return numbers


def missing_pages(root, pages, files):
    """'page:line: why' for every page named in a page's text (by its file name) that is not in
    the tree, or that lacks the numbered section named after it."""
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    found = []
    for page in pages:
        with open(os.path.join(root, page), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for m in NAMED.finditer(line):
                    name, section = os.path.basename(m.group(1)), m.group(2)
                    where = f"{page}:{number}: '{m.group(0).strip()}'"
                    if name in WRITTEN:
                        continue
                    if name not in by_name:
                        found.append(f"{where}: no page {name} in the tree")
                    elif section and not any(
                        section in numbered_sections(os.path.join(root, p)) for p in by_name[name]
                    ):
                        found.append(f"{where}: {name} has no section {section}")
    return found


def outside_references(root, files):
    """'file:line: ...' for every line of a tracked text file that names a folder beside it."""
    found = []
    for name in files:
        if name == "ci/docs_links.py":
            continue
        try:
            with open(os.path.join(root, name), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if OUTSIDE.search(line):
                        found.append(
                            f"{name}:{number}: names a folder outside the repository: "
                            f"{line.strip()[:100]}"
                        )
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
    return found


def check(root):
    files = tracked_files(root)
    pages = sorted(f for f in files if f.endswith(".md"))
    findings = (
        broken_links(root, pages)
        + missing_pages(root, pages, files)
        + outside_references(root, files)
    )
    for line in findings:
        print(line)
    links = sum(1 for p in pages for _ in links_of(os.path.join(root, p)))
    print(
        f"docs_links: {len(pages)} pages, {links} links, {len(files)} files: "
        f"{len(findings)} finding(s)"
    )
    return 1 if findings else 0


def self_test():
    """A tree with one broken link of each kind and one outside reference: all four found."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "docs", "a.md"), "w") as f:
            f.write("# Page A\n\n## 1. The `x` part\n\n```\n[not a link](docs/a.md)\n```\n")
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write(
                "[ok](docs/a.md#1-the-x-part) [ok](docs/a.md) [web](https://example.org)\n"
                "[no file](docs/b.md)\n[no anchor](docs/a.md#page-b)\n"
                "[outside](../elsewhere/x.md)\n"
                "a.md §1 is there; SPEC.md §5 is not; neither is a.md §2\n"
            )
        with open(os.path.join(root, "notes.txt"), "w") as f:
            f.write("see ../" + "shared/SPEC.md\n")
        files = ["README.md", "docs/a.md", "notes.txt"]
        pages = ["README.md", "docs/a.md"]
        found = (
            broken_links(root, pages)
            + missing_pages(root, pages, files)
            + outside_references(root, files)
        )
    expected = [
        "no file docs/b.md",
        "no heading with anchor '#page-b'",
        "leaves the repository",
        "no page b.md",
        "no page x.md",
        "no page SPEC.md",
        "a.md has no section 2",
        "names a folder outside",
    ]
    missing = [e for e in expected if not any(e in line for line in found)]
    if missing or len(found) != len(expected):
        print("docs_links self-test FAILED: missing", missing, "found", found)
        return 1
    print(f"docs_links self-test: the {len(expected)} planted findings found, nothing else")
    return 0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    sys.exit(self_test() if args.self_test else check(os.path.abspath(args.root)))


if __name__ == "__main__":
    main()
