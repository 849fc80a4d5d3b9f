"""The link checker finds what it is for: planted broken links fail it,
working ones (GitHub anchors, repeated headings, code left alone) pass."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_links  # noqa: E402

CHECKER = os.path.join(HERE, 'check_links.py')

GOOD_INDEX = """# Docs

- [The page](page.md): what it answers.
- [A section](page.md#reshardplanv2-what-to-read) of it.
- [The second "Notes"](page.md#notes-1) and [the third](page.md#notes-2).
- [Here](#docs), [code](../src/x.c) and [elsewhere](https://example.com/a#b).

```
[not a link](missing.md) inside a fenced block
```

`[not a link either](missing.md)` in a code span, and `a span that
wraps [past a line](missing.md)` too.

A link whose text [wraps onto
the next line](page.md#notes) of its paragraph.
"""

GOOD_PAGE = """# Page

## `reshard.plan.v2`: what to read

## Notes

## Notes

## Notes

## Cost model (`plan_cost.c`, `plan_cost_guard.c`)

Back to [the index](README.md#docs) and
[the cost model](#cost-model-plan_costc-plan_cost_guardc).
"""


def make_tree(tmp_path, index=GOOD_INDEX, page=GOOD_PAGE):
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'src').mkdir()
    (tmp_path / 'src' / 'x.c').write_text('int x;\n')
    (tmp_path / 'README.md').write_text('# Top\n\nSee [docs](docs/README.md).\n')
    (tmp_path / 'docs' / 'README.md').write_text(index)
    (tmp_path / 'docs' / 'page.md').write_text(page)
    return tmp_path


def run(root):
    return subprocess.run([sys.executable, CHECKER, str(root)],
                          capture_output=True, text=True)


def test_slugs_follow_github():
    assert check_links.slug('`reshard.plan.v2`: what to read') == \
        'reshardplanv2-what-to-read'
    assert check_links.slug('4.6 Staged reads (`plan_stage.c`)') == \
        '46-staged-reads-plan_stagec'
    assert check_links.slug('Leases: never a mix of two versions') == \
        'leases-never-a-mix-of-two-versions'
    assert check_links.slug("UCX's own log") == 'ucxs-own-log'


def test_good_tree_passes(tmp_path):
    result = run(make_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ''


# Each case plants text at the end of one page (its last line holds the
# broken target) and names the report the checker must print for it.
BROKEN = [
    ('README.md', 'And [gone](gone.md).', 'gone.md: no such file: gone.md'),
    ('page.md', 'See [nothing](README.md#no-such-heading).',
     'README.md#no-such-heading: no heading #no-such-heading in README.md'),
    ('README.md', 'A [wrapped\nlink](page.md#nowhere) here.',
     'page.md#nowhere: no heading #nowhere in page.md'),
    ('README.md', '[fourth notes](page.md#notes-3)',
     'page.md#notes-3: no heading #notes-3 in page.md'),
    ('page.md', '[up](#pag)', '#pag: no heading #pag in page.md'),
]


@pytest.mark.parametrize('where,planted,report', BROKEN)
def test_planted_broken_link_fails(tmp_path, where, planted, report):
    pages = {'README.md': GOOD_INDEX, 'page.md': GOOD_PAGE}
    pages[where] += '\n' + planted + '\n'
    root = make_tree(tmp_path, index=pages['README.md'], page=pages['page.md'])
    result = run(root)
    assert result.returncode == 1
    line = pages[where].count('\n')
    assert result.stdout == 'docs/%s:%d: %s\n' % (where, line, report)


if __name__ == '__main__':
    sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', __file__]))
