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


def test_missing_file_fails_naming_file_and_line(tmp_path):
    index = GOOD_INDEX + '\nAnd [gone](gone.md).\n'
    result = run(make_tree(tmp_path, index=index))
    assert result.returncode == 1
    line = index.split('\n').index('And [gone](gone.md).') + 1
    assert 'docs/README.md:%d: gone.md: no such file' % line in result.stdout


def test_missing_anchor_fails(tmp_path):
    page = GOOD_PAGE + '\nSee [nothing](README.md#no-such-heading).\n'
    result = run(make_tree(tmp_path, page=page))
    assert result.returncode == 1
    assert 'docs/page.md:' in result.stdout
    assert 'README.md#no-such-heading: no heading #no-such-heading' \
        in result.stdout


def test_wrapped_link_is_checked_at_its_target_line(tmp_path):
    index = GOOD_INDEX + '\nA [wrapped\nlink](page.md#nowhere) here.\n'
    result = run(make_tree(tmp_path, index=index))
    assert result.returncode == 1
    line = index.split('\n').index('link](page.md#nowhere) here.') + 1
    assert 'docs/README.md:%d: page.md#nowhere' % line in result.stdout


def test_duplicate_suffix_past_the_last_fails(tmp_path):
    index = GOOD_INDEX + '\n[fourth notes](page.md#notes-3)\n'
    result = run(make_tree(tmp_path, index=index))
    assert result.returncode == 1
    assert 'page.md#notes-3' in result.stdout


def test_anchor_in_the_same_page_is_checked(tmp_path):
    page = GOOD_PAGE + '\n[up](#pag)\n'
    result = run(make_tree(tmp_path, page=page))
    assert result.returncode == 1
    assert '#pag: no heading #pag in page.md' in result.stdout


if __name__ == '__main__':
    sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', __file__]))
