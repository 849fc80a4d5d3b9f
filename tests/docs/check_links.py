#!/usr/bin/env python3
"""Check the relative links of reshard's markdown documentation.

Every relative link in README.md and docs/*.md must name a file or folder
that exists, and a '#anchor' on a markdown page must name one of that
page's headings as GitHub spells them (lowercase, spaces to '-',
punctuation dropped, '-1', '-2', ... on repeated headings). Links to
other sites are not followed. Prints 'file:line: link: why' for each
broken link and exits 1 when there is one.

Usage: check_links.py [ROOT]   (ROOT defaults to the source tree)
"""

import os
import re
import sys

FENCE = re.compile(r'^\s*(```|~~~)')
HEADING = re.compile(r'^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$')
# A code span may wrap onto the next line, never past a blank one.
CODE_SPAN = re.compile(r'(`+)((?:(?!\n\s*\n)[\s\S])+?)\1')
# [text](target) or ![alt](target): the text may wrap over lines of one
# paragraph; the target ends at a space or ')'.
INLINE_LINK = re.compile(r'!?\[(?:[^\[\]\n]|\n(?!\s*\n)|\[[^\]\n]*\])*\]'
                         r'\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)')
REF_DEF = re.compile(r'^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s+.*)?$')
HTML_ANCHOR = re.compile(r'<a\s+(?:name|id)="([^"]+)"')
EXTERNAL = re.compile(r'^[a-zA-Z][a-zA-Z0-9+.-]*:')


def doc_lines(text):
    """Yield (line number, line) outside fenced code blocks."""
    in_fence = None
    for number, line in enumerate(text.split('\n'), 1):
        fence = FENCE.match(line)
        if fence:
            if in_fence is None:
                in_fence = fence.group(1)
            elif fence.group(1) == in_fence:
                in_fence = None
            continue
        if in_fence is None:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)   # links: text
    text = re.sub(r'<[^>]+>', '', text)                       # inline HTML
    text = text.replace('*', '')                              # emphasis
    text = text.strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def anchors(text):
    """Every anchor a page defines, with GitHub's duplicate suffixes."""
    seen = {}
    found = set()
    for _, line in doc_lines(text):
        for name in HTML_ANCHOR.findall(line):
            found.add(name)
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else '%s-%d' % (base, count))
    return found


def blank_out(match):
    """A code span's text as spaces, keeping its line breaks."""
    return re.sub(r'[^\n]', ' ', match.group(0))


def links(text):
    """Yield (line number, target) of every link outside code."""
    kept = [''] * (text.count('\n') + 1)
    for number, line in doc_lines(text):
        kept[number - 1] = line
        ref = REF_DEF.match(line)
        if ref:
            yield number, ref.group(1)
            kept[number - 1] = ''
    prose = CODE_SPAN.sub(blank_out, '\n'.join(kept))
    for match in INLINE_LINK.finditer(prose):
        yield prose.count('\n', 0, match.start(1)) + 1, match.group(1)


def check_link(page, target, cache):
    """Why a link is broken, or None when it resolves."""
    if not target or EXTERNAL.match(target) or target.startswith('//'):
        return None
    path, _, anchor = target.partition('#')
    if path:
        full = os.path.normpath(os.path.join(os.path.dirname(page), path))
        if not os.path.exists(full):
            return 'no such file: %s' % path
    else:
        full = page
    if not anchor or not full.endswith('.md') or os.path.isdir(full):
        return None
    if full not in cache:
        with open(full, encoding='utf-8') as f:
            cache[full] = anchors(f.read())
    if anchor not in cache[full]:
        return 'no heading #%s in %s' % (anchor, os.path.basename(full))
    return None


def pages(root):
    """README.md and every docs/*.md page under root."""
    found = []
    readme = os.path.join(root, 'README.md')
    if os.path.exists(readme):
        found.append(readme)
    docs = os.path.join(root, 'docs')
    if os.path.isdir(docs):
        found += sorted(os.path.join(docs, n) for n in os.listdir(docs)
                        if n.endswith('.md'))
    return found


def check_tree(root):
    """Every broken link under root, as 'file:line: link: why' lines."""
    problems = []
    cache = {}
    for page in pages(root):
        with open(page, encoding='utf-8') as f:
            text = f.read()
        for number, target in links(text):
            why = check_link(page, target, cache)
            if why:
                rel = os.path.relpath(page, root)
                problems.append('%s:%d: %s: %s' % (rel, number, target, why))
    return problems


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = argv[1] if len(argv) > 1 else os.path.join(here, '..', '..')
    root = os.path.abspath(root)
    if not pages(root):
        print('check_links: no README.md or docs/*.md under %s' % root,
              file=sys.stderr)
        return 2
    problems = check_tree(root)
    for problem in problems:
        print(problem)
    if problems:
        print('check_links: %d broken link(s)' % len(problems),
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
