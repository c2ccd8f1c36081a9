#!/usr/bin/env python3
"""Check the relative links between the project's Markdown documents.

Reads README.md, CHANGELOG.md, CONTRIBUTING.md and docs/*.md (from the
repository root, or the directory given as the only argument). Every
relative link must name a file that exists, and every #anchor a heading of
the target file (of the same file for a bare #anchor), with GitHub's slug
rules. http(s) and mailto links, and anything inside fenced code blocks or
inline code, are ignored. Prints `file:line: broken link ...` for each
problem and exits 1 if there is any, else 0 with a one-line summary.
"""

import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
CODE_SPAN = re.compile(r"(`+)(?:(?!\n[ \t]*\n).)+?\1", re.S)
# [text](target) or [text](target "title"); ![alt](img) too.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)")


def documents(root):
    names = ["README.md", "CHANGELOG.md", "CONTRIBUTING.md"]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        names += sorted(
            os.path.join("docs", n) for n in os.listdir(docs) if n.endswith(".md")
        )
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def lines_outside_fences(text):
    """(line number, line) for each line not inside a fenced code block."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield number, line
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            fence = None


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    seen = {}
    result = set()
    for _, line in lines_outside_fences(text):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def links(text):
    """(line number, target) for each link outside code; link text may span lines."""
    kept = text.split("\n")
    outside = dict(lines_outside_fences(text))
    body = "\n".join(outside.get(n, "") for n in range(1, len(kept) + 1))
    # Code spans (which may wrap, never across a blank line) become blanks,
    # newlines kept, so that offsets still give line numbers.
    body = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), body)
    for number, line in enumerate(body.split("\n"), 1):
        m = REFERENCE.match(line)
        if m:
            yield number, m.group(1)
    for m in INLINE_LINK.finditer(body):
        yield body.count("\n", 0, m.start(1)) + 1, m.group(1)


def check(root):
    files = documents(root)
    cache = {}

    def anchors_of(path):
        if path not in cache:
            with open(path, encoding="utf-8") as f:
                cache[path] = anchors(f.read())
        return cache[path]

    problems = []
    checked = 0
    for name in files:
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for number, target in links(text):
            if not target or EXTERNAL.match(target):
                continue
            checked += 1
            file_part, _, anchor = target.partition("#")
            file_part = urllib.parse.unquote(file_part)
            anchor = urllib.parse.unquote(anchor)
            if file_part:
                if file_part.startswith("/"):
                    dest = os.path.join(root, file_part.lstrip("/"))
                else:
                    dest = os.path.join(os.path.dirname(path), file_part)
                dest = os.path.normpath(dest)
                if not os.path.exists(dest):
                    problems.append(f"{name}:{number}: broken link {target}: no file {os.path.relpath(dest, root)}")
                    continue
            else:
                dest = path
            if anchor:
                if not dest.endswith(".md") or not os.path.isfile(dest):
                    problems.append(f"{name}:{number}: broken link {target}: an anchor into a file that is not Markdown")
                elif anchor.lower() not in anchors_of(dest):
                    problems.append(f"{name}:{number}: broken link {target}: no heading #{anchor} in {os.path.relpath(dest, root)}")
    return files, checked, problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    root = os.path.normpath(root)
    files, checked, problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"doc_links: {len(problems)} broken of {checked} relative links in {len(files)} files", file=sys.stderr)
        return 1
    print(f"doc_links: {checked} relative links in {len(files)} files, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
