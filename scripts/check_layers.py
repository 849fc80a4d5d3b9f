#!/usr/bin/env python3
"""The layer check: every #include and every call between layers goes down.

Layers (each may use itself and those it names):
  core                                   src/core, the core public headers
  geom    core                           src/geom, reshard/view.h
  model   core geom                      src/model, capture.h sources.h cuts.h
  plan    core geom model                src/plan, reshard/plan.h
  exec    core geom model plan           src/exec, exec.h expose.h transport.h
  dir     core                           src/dir, reshard/dir.h
  refit   every library layer            src/refit, refit.h, reshard.h
  layout  core geom model, public API    src/layout, include/reshard_layout
  tools   public API only                tools/ (the CLI)
  bench   everything                     bench/ (measures internals, as tests)

An #include of a header of a layer the file may not use is a violation;
so is a public header (include/) including a private one (src/). With
--build, the objects of a build tree are read with nm: an rs_/rs__ symbol
an object needs must be defined in a layer its own layer may use (layout
and the CLI may also call what libreshard.so exports).

  check_layers.py [--root DIR] [--build BUILD_DIR]

Prints one line per violation and exits 1 if there is any."""
import argparse
import os
import re
import subprocess
import sys

LIBRARY = ['core', 'geom', 'model', 'plan', 'exec', 'dir', 'refit']
MAY_USE = {
    'core': {'core'},
    'geom': {'core', 'geom'},
    'model': {'core', 'geom', 'model'},
    'plan': {'core', 'geom', 'model', 'plan'},
    'exec': {'core', 'geom', 'model', 'plan', 'exec'},
    'dir': {'core', 'dir'},
    'refit': set(LIBRARY),
    'layout': {'core', 'geom', 'model', 'layout'},
    'tools': {'tools'},
    'bench': set(LIBRARY) | {'layout', 'bench'},
}
# Public headers reachable beyond the layer's own: layout and the CLI use
# libreshard through its public API (include/), whatever the layer.
PUBLIC_API_USERS = {'layout', 'tools'}
# The layer of each public header under include/reshard/: where what it
# declares is implemented.
PUBLIC = {
    'status.h': 'core', 'dtype.h': 'core', 'units.h': 'core',
    'version.h': 'core', 'cancel.h': 'core', 'memory.h': 'core',
    'digest.h': 'core', 'quant.h': 'core', 'limits.h': 'core',
    'view.h': 'geom',
    'capture.h': 'model', 'sources.h': 'model', 'cuts.h': 'model',
    'plan.h': 'plan',
    'exec.h': 'exec', 'expose.h': 'exec', 'transport.h': 'exec',
    'dir.h': 'dir',
    'refit.h': 'refit', 'reshard.h': 'refit',
}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SCANNED = ('src', 'include', 'tools', 'bench')


def rule(layer):
    """The rule a layer lives by, as a violation message states it."""
    uses = sorted(MAY_USE[layer] - {layer}, key=order)
    text = '%s may use %s' % (layer, ', '.join(uses + [layer]) if uses
                              else 'only itself')
    if layer in PUBLIC_API_USERS:
        text += ' and the public API'
    return text


def order(layer):
    names = LIBRARY + ['layout', 'tools', 'bench']
    return names.index(layer)


def layer_of_path(rel):
    """The layer a repository file belongs to, or None when unchecked."""
    parts = rel.split('/')
    if parts[0] == 'src' and len(parts) > 2:
        return parts[1] if parts[1] in MAY_USE else None
    if parts[0] == 'include' and len(parts) == 3:
        if parts[1] == 'reshard_layout':
            return 'layout'
        if parts[1] == 'reshard':
            return PUBLIC.get(parts[2], 'unmapped')
    if parts[0] in ('tools', 'bench'):
        return parts[0]
    return None


def resolve(root, rel, name):
    """The repository path an #include "name" in file rel reads, or None."""
    here = os.path.dirname(rel)
    for base in (here, 'include', 'src'):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, path)):
            return path
    return None


def include_violation(root, rel, layer, name):
    """Why `#include "name"` in rel (of layer) breaks the rule, or None."""
    target = resolve(root, rel, name)
    if target is None:
        return 'no such header under the file\'s folder, include/ or src/'
    to = layer_of_path(target)
    if to == 'unmapped':
        return 'public header %s has no layer: add it to PUBLIC in %s' % (
            target, os.path.basename(__file__))
    if to is None:
        return None if layer == 'bench' else \
            'includes %s, outside the layers' % target
    if layer == 'unmapped':
        return 'public header %s has no layer: add it to PUBLIC in %s' % (
            rel, os.path.basename(__file__))
    public = target.startswith('include/')
    if rel.startswith('include/') and not public:
        return 'a public header includes only public headers'
    if to in MAY_USE[layer]:
        return None
    if public and layer in PUBLIC_API_USERS:
        return None
    return '%s header %s: %s' % (to, target, rule(layer))


def check_includes(root):
    found = []
    for top in SCANNED:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(('.c', '.h')):
                    continue
                rel = os.path.relpath(os.path.join(d, f), root)
                layer = layer_of_path(rel)
                if layer is None:
                    continue
                with open(os.path.join(root, rel), errors='replace') as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        why = include_violation(root, rel, layer, m.group(1))
                        if why:
                            found.append('%s:%d: #include "%s": %s' % (
                                rel, n, m.group(1), why))
    return found


def nm(args):
    """nm's output lines for args."""
    return subprocess.run(['nm'] + args, check=True, capture_output=True,
                          text=True).stdout.splitlines()


def objects(build):
    """(object path, layer) for every object of the layers in a build tree."""
    found = []
    for d, _, files in os.walk(build):
        rel = os.path.relpath(d, build).replace(os.sep, '/')
        m = re.match(r'(?:.*/)?CMakeFiles/[^/]+\.dir/(.*)$', rel)
        if not m:
            continue
        layer = layer_of_path(m.group(1) + '/x.c')
        for f in sorted(files):
            if layer and f.endswith('.o'):
                found.append((os.path.join(d, f), layer))
    return found


def check_calls(build):
    objs = objects(build)
    defined, needs = {}, []
    layer_of = dict(objs)
    # One nm for all objects: "<object>.o:<value> <type> <name>".
    for line in nm(['-A'] + [path for path, _ in objs]) if objs else []:
        path, rest = line.split('.o:', 1)
        row = rest.split()
        if len(row) < 2 or not row[-1].startswith('rs_'):
            continue
        path += '.o'
        if row[-2] == 'U':
            needs.append((path, layer_of[path], row[-1]))
        elif row[-2] in 'TDBR':
            defined.setdefault(row[-1], (layer_of[path], path))
    # The public API: what libreshard.so exports; a tree without it (a
    # test's) counts every rs_ name that is not rs__.
    lib = os.path.join(build, 'libreshard.so')
    exported = None
    if os.path.exists(lib):
        exported = {r.split()[-1] for r in nm(['-D', '--defined-only', lib])}
    found = []
    for path, layer, sym in needs:
        if sym not in defined:
            continue  # defined outside the layers (a test, a program)
        to, where = defined[sym]
        if to in MAY_USE[layer]:
            continue
        public = not sym.startswith('rs__') and (
            exported is None or sym in exported or to == 'layout')
        if layer in PUBLIC_API_USERS and public:
            continue
        found.append('%s: calls %s, defined in %s (%s): %s' % (
            os.path.relpath(path, build), sym, to,
            os.path.relpath(where, build), rule(layer)))
    return found, len(objs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--root', default=os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument('--build', help='a build tree whose objects to read')
    a = ap.parse_args()
    found = check_includes(a.root)
    nobj = 0
    if a.build:
        calls, nobj = check_calls(a.build)
        found += calls
    for line in found:
        print('layers: ' + line)
    if found:
        print('layers: %d violation(s); the rule is in %s' % (
            len(found), os.path.relpath(__file__, a.root)))
        return 1
    print('layers: clean (includes%s)' % (
        ', calls of %d objects' % nobj if a.build else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
