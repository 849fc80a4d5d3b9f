#!/usr/bin/env python3
"""The mutation gate: apply each mutant of tests/mutate/mutants.txt to a
scratch copy of the tree, rebuild what its tests need, run them, and report
which mutants the tests kill.

    run.py [--build DIR] [--mutate-venv VENV] [--only ID,ID] [--no-baseline]
           [--timeout S] [--jobs N]

The working tree is never written: DIR/tree is a copy of its tracked and
untracked-but-not-ignored files, refreshed each run (a file is rewritten
only when its content differs, so the Release tree DIR/obj rebuilds
incrementally), and every mutant is undone in that copy before the next.

Mutants marked `um` must be among those universalmutator (VENV/bin/mutate)
generates for their line, so the list stays a selection of the tool's
mutants; `hand` mutants are the ones its rules cannot write (an off-by-one
on a bound, a changed constant). Format: tests/mutate/README.md.

Exit status: 0 when every mutant is killed or recorded as equivalent and
survives; 1 when one survives unexplained, a baseline run fails or a
mutant no longer applies; 2 on a usage error.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Test programs that ctest runs as one test per part (tests/CMakeLists.txt).
PART_PROGRAMS = ("test_lease", "test_transport")


class Mutant:
    def __init__(self, mid, origin, path, func, lineno):
        self.id, self.origin, self.path, self.func = mid, origin, path, func
        self.defined_at = lineno
        self.old = self.new = None
        self.ctest, self.pytest = [], []
        self.equivalent = None
        self.line = None          # 0-based line in the file, once located


def fail(msg):
    sys.exit(f"mutate: {msg}")


def parse(list_path):
    """Blocks: `ID ORIGIN FILE FUNCTION`, then `- old`, `+ new`, `ctest:`,
    `pytest:` (repeatable) and optional `equivalent:` lines, indented."""
    mutants, cur = [], None
    with open(list_path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if not line[0].isspace():
                parts = line.split()
                if len(parts) != 4 or parts[1] not in ("um", "hand"):
                    fail(f"{list_path}:{n}: want 'ID um|hand FILE FUNCTION'")
                cur = Mutant(parts[0], parts[1], parts[2], parts[3], n)
                mutants.append(cur)
                continue
            if cur is None:
                fail(f"{list_path}:{n}: field before the first mutant")
            body = line.strip()
            if body.startswith("- "):
                cur.old = body[2:].strip()
            elif body.startswith("+ ") or body == "+":
                cur.new = body[2:].strip()
            elif body.startswith("ctest:"):
                cur.ctest += body[6:].split()
            elif body.startswith("pytest:"):
                cur.pytest.append(body[7:].strip())
            elif body.startswith("equivalent:"):
                cur.equivalent = body[11:].strip()
            else:
                fail(f"{list_path}:{n}: unknown field: {body}")
    ids = set()
    for m in mutants:
        if m.id in ids:
            fail(f"{list_path}:{m.defined_at}: {m.id} twice")
        ids.add(m.id)
        if m.old is None or m.new is None:
            fail(f"{list_path}:{m.defined_at}: {m.id} needs '- old' and '+ new'")
        if not m.ctest and not m.pytest:
            fail(f"{list_path}:{m.defined_at}: {m.id} names no tests")
    return mutants


def func_range(lines, path, func):
    """The lines of FUNCTION's body: C from its definition (a line starting
    in column 0 that names it, followed by '(') to the next '}' in column 0;
    Python from `def FUNCTION(` to the next line indented no deeper."""
    if path.endswith(".py"):
        for i, l in enumerate(lines):
            m = re.match(r"(\s*)(async\s+)?def\s+" + re.escape(func) + r"\(", l)
            if m:
                ind = len(m.group(1))
                j = i + 1
                while j < len(lines):
                    s = lines[j]
                    if s.strip() and len(s) - len(s.lstrip()) <= ind and \
                            not s.lstrip().startswith(")"):
                        break
                    j += 1
                return i, j
        return None
    pat = re.compile(r"^[A-Za-z_].*\b" + re.escape(func) + r"\s*\(")
    for i, l in enumerate(lines):
        if pat.match(l) and not l.rstrip().endswith(";"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("}"):
                j += 1
            return i, j + 1
    return None


def locate(m, lines):
    """The one line of m.func whose stripped text is m.old. FUNCTION may
    name alternatives, a|b, for a function that was renamed."""
    rng = None
    for name in m.func.split("|"):
        rng = rng or func_range(lines, m.path, name)
    if rng is None:
        return f"no function {m.func} in {m.path}"
    hits = [i for i in range(*rng) if lines[i].strip() == m.old]
    if len(hits) != 1:
        return (f"'{m.old}' found {len(hits)} times in {m.func} "
                f"({m.path}), want once")
    m.line = hits[0]
    return None


def sync_tree(tree):
    """Copy the working tree's files into TREE, rewriting only those whose
    content differs, and drop files the working tree no longer has."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"],
                         cwd=ROOT, check=True, capture_output=True).stdout
    files = [f for f in out.decode().split("\0") if f]
    want = set()
    for rel in files:
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src) or os.path.islink(src):
            continue
        want.add(rel)
        dst = os.path.join(tree, rel)
        with open(src, "rb") as f:
            data = f.read()
        if os.path.isfile(dst):
            with open(dst, "rb") as f:
                if f.read() == data:
                    continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
        shutil.copymode(src, dst)
    for dirpath, _, names in os.walk(tree):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), tree)
            if rel not in want and not rel.endswith(".pyc"):
                os.unlink(os.path.join(dirpath, n))


def um_lines(venv, path, linenos):
    """Every line universalmutator writes for the given 1-based lines of
    PATH: {lineno: set of stripped mutated lines}."""
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        lf = os.path.join(tmp, "lines")
        with open(lf, "w") as f:
            f.write("".join(f"{n}\n" for n in sorted(linenos)))
        src = os.path.join(tmp, os.path.basename(path))
        shutil.copy(path, src)
        lang = "python" if path.endswith(".py") else "c"
        r = subprocess.run([os.path.join(venv, "bin", "mutate"), src, lang,
                            "--lines", lf, "--noCheck", "--mutantDir",
                            os.path.join(tmp, "out")],
                           cwd=tmp, capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"universalmutator failed on {path}:\n{r.stderr[-2000:]}")
        with open(path) as f:
            orig = f.read().split("\n")
        outdir = os.path.join(tmp, "out")
        for name in os.listdir(outdir):
            with open(os.path.join(outdir, name)) as f:
                mut = f.read().split("\n")
            if len(mut) != len(orig):
                continue
            for i, (a, b) in enumerate(zip(orig, mut)):
                if a != b:
                    got.setdefault(i + 1, set()).add(b.strip())
                    break
    return got


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)
    now = time.time()
    os.utime(path, (now, now))


def targets_of(m):
    t = set()
    for name in m.ctest:
        if name.startswith("cli_"):
            t.add("reshard_cli")
            continue
        prog = name
        for p in PART_PROGRAMS:
            if name.startswith(p + "_"):
                prog = p
        t.add(prog)
    if m.pytest:
        t.add("reshard")
    return sorted(t)


def run_cmd(cmd, cwd, timeout, env=None, log=None):
    """(status, seconds): 'pass', 'fail' or 'timeout'."""
    t0 = time.time()
    # Its own process group, so that a timeout ends the test programs too
    # (ctest's --timeout does not apply to tests that set TIMEOUT).
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        status = "pass" if p.returncode == 0 else "fail"
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        status = "timeout"
    if log is not None:
        log.write(f"$ {' '.join(cmd)}\n")
        log.write(out.decode(errors="replace")[-4000:])
        log.write(f"\n[{status}]\n")
        log.flush()
    return status, time.time() - t0


def build(obj, targets, jobs, log):
    st, _ = run_cmd(["cmake", "--build", obj, "-j", str(jobs), "--target"] +
                    targets, None, 1800, log=log)
    return st == "pass"


def run_tests(m, tree, obj, timeout, log):
    """'killed' by the first failing or hanging test, else 'survived'.
    Returns (verdict, the test that killed it)."""
    if m.ctest:
        rx = "^(" + "|".join(re.escape(t) for t in m.ctest) + ")$"
        st, _ = run_cmd(["ctest", "--test-dir", obj, "-R", rx,
                         "--stop-on-failure", "--timeout", str(timeout),
                         "--output-on-failure"], None, timeout, log=log)
        if st != "pass":
            return "killed", "ctest " + " ".join(m.ctest)
    env = dict(os.environ, RESHARD_LIB=os.path.join(obj, "libreshard.so"),
               PYTHONPATH=os.path.join(tree, "python"),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("RESHARD_TEST_INSTALLED", None)
    for sel in m.pytest:
        st, _ = run_cmd(["/usr/bin/python3", "-m", "pytest", "-x", "-q",
                         "-p", "no:cacheprovider"] + sel.split(), tree,
                        timeout, env=env, log=log)
        if st != "pass":
            return "killed", "pytest " + sel
    return "survived", ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build-mutate"))
    ap.add_argument("--mutate-venv",
                    default=os.path.expanduser("~/.cache/reshard/venv-mutate"))
    ap.add_argument("--list", default=os.path.join(HERE, "mutants.txt"))
    ap.add_argument("--only", default="")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--timeout", type=int, default=180)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--check", action="store_true",
                    help="only check that every mutant applies")
    a = ap.parse_args()

    mutants = parse(a.list)
    if a.only:
        keep = set(a.only.split(","))
        mutants = [m for m in mutants if m.id in keep]
    a.build = os.path.abspath(a.build)
    tree, obj = os.path.join(a.build, "tree"), os.path.join(a.build, "obj")
    os.makedirs(tree, exist_ok=True)
    t_start = time.time()
    sync_tree(tree)
    # Configured each run, so new test programs become targets. Warnings
    # are not errors here: a mutant that only warns is still a program the
    # tests must reject.
    subprocess.run(["cmake", "-S", tree, "-B", obj,
                    "-DCMAKE_BUILD_TYPE=Release", "-DRESHARD_WERROR=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    log = open(os.path.join(a.build, "mutate.log"), "w")

    # Locate every mutant in the pristine copy, and check the `um` ones
    # against what universalmutator generates for their lines.
    text, problems = {}, []
    for m in mutants:
        p = os.path.join(tree, m.path)
        if p not in text:
            if not os.path.isfile(p):
                problems.append(f"{m.id}: no file {m.path}")
                continue
            with open(p) as f:
                text[p] = f.read()
        err = locate(m, text[p].split("\n"))
        if err:
            problems.append(f"{m.id}: {err}")
    by_file = {}
    for m in mutants:
        if m.line is not None and m.origin == "um":
            by_file.setdefault(m.path, []).append(m)
    for path, ms in by_file.items():
        gen = um_lines(a.mutate_venv, os.path.join(tree, path),
                       {m.line + 1 for m in ms})
        for m in ms:
            if m.new not in gen.get(m.line + 1, set()):
                problems.append(f"{m.id}: universalmutator does not write "
                                f"'{m.new}' for {path}:{m.line + 1} "
                                "(mark it hand, or pick one it writes)")
    if problems:
        print("mutate: the list does not apply to this tree:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    if a.check:
        print(f"mutate: all {len(mutants)} mutants apply")
        return 0

    # A test a selection names that this tree lacks (one of another branch
    # not merged yet) is left out, and said; a selection left empty fails.
    listed = subprocess.run(["ctest", "--test-dir", obj, "-N"],
                            capture_output=True, text=True).stdout
    have = set(re.findall(r"Test\s+#\d+: (\S+)", listed))
    missing = sorted({t for m in mutants for t in m.ctest if t not in have})
    if missing:
        print(f"mutate: not in this tree, left out: {' '.join(missing)}",
              flush=True)
    for m in mutants:
        m.ctest = [t for t in m.ctest if t in have]
        if not m.ctest and not m.pytest:
            fail(f"{m.id}: none of its tests is in this tree")
    all_targets = sorted({t for m in mutants for t in targets_of(m)})
    print(f"mutate: {len(mutants)} mutants; building {len(all_targets)} "
          f"targets in {obj}", flush=True)
    if not build(obj, all_targets, a.jobs, log):
        fail(f"the unmutated tree does not build (see {a.build}/mutate.log)")
    limits = {}
    if not a.no_baseline:
        seen = set()
        for m in mutants:
            key = (tuple(m.ctest), tuple(m.pytest))
            if key in seen:
                continue
            seen.add(key)
            t0 = time.time()
            v, what = run_tests(m, tree, obj, a.timeout, log)
            # A mutant that makes a test loop is cut off at ten times the
            # selection's unmutated time (at least 30 s).
            limits[key] = min(a.timeout, max(30, int(10 * (time.time() - t0))))
            if v != "survived":
                fail(f"unmutated, {what} fails (see {a.build}/mutate.log)")
        print(f"mutate: baseline passes ({len(seen)} test selections)",
              flush=True)

    results = []
    for k, m in enumerate(mutants, 1):
        p = os.path.join(tree, m.path)
        lines = text[p].split("\n")
        ind = lines[m.line][:len(lines[m.line]) - len(lines[m.line].lstrip())]
        lines[m.line] = ind + m.new
        t0 = time.time()
        log.write(f"\n==== {m.id} {m.path}:{m.line + 1} {m.old} ==> {m.new}\n")
        write_file(p, "\n".join(lines))
        try:
            if not build(obj, targets_of(m), a.jobs, log):
                verdict, what = "build-failure", ""
            else:
                key = (tuple(m.ctest), tuple(m.pytest))
                verdict, what = run_tests(m, tree, obj,
                                          limits.get(key, a.timeout), log)
        finally:
            write_file(p, text[p])
        if verdict == "survived" and m.equivalent:
            verdict = "equivalent"
        dt = time.time() - t0
        results.append((m, verdict, what, dt))
        print(f"[{k}/{len(mutants)}] {m.id:5} {verdict:13} {dt:5.0f}s  "
              f"{m.path}:{m.line + 1} {m.func}", flush=True)
    # Leave the copy's objects built from the unmutated sources.
    build(obj, all_targets, a.jobs, log)

    report = write_report(a, results, time.time() - t_start)
    print(report)
    return 0 if all(v != "survived" for _, v, _, _ in results) else 1


def write_report(a, results, seconds):
    killed = sum(v == "killed" for _, v, _, _ in results)
    surv = [r for r in results if r[1] == "survived"]
    equiv = [r for r in results if r[1] == "equivalent"]
    bf = [r for r in results if r[1] == "build-failure"]
    scored = killed + len(surv)
    out = ["# Mutation report", "",
           f"{len(results)} mutants: {killed} killed, {len(surv)} survived, "
           f"{len(equiv)} equivalent, {len(bf)} did not build; "
           f"score {killed}/{scored} = "
           f"{100.0 * killed / scored if scored else 100.0:.1f} % of the "
           f"non-equivalent mutants, in {seconds / 60:.1f} min.", "",
           "| id | verdict | where | mutation | killed by |",
           "| --- | --- | --- | --- | --- |"]
    for m, v, what, _ in results:
        cell = lambda t: t.replace("|", "\\|")
        out.append(f"| {m.id} | {v} | {m.path}:{m.line + 1} {m.func} | "
                   f"`{cell(m.old)}` -> `{cell(m.new)}` | "
                   f"{cell(what or m.equivalent or '')} |")
    for m, _, _, _ in surv:
        out.append(f"\nSURVIVED {m.id}: {m.path}:{m.line + 1} ({m.func}) "
                   f"{m.old} ==> {m.new}")
    text = "\n".join(out) + "\n"
    with open(os.path.join(a.build, "mutate-report.md"), "w") as f:
        f.write(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
