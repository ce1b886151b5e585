#!/usr/bin/env python3
"""Records in results files the commit of the tree that produced them (issue 12: every
results file under experiments/ names the commit it measured; scripts/check_results.sh
checks it).

    scripts/record_commit.py COMMIT FILE_OR_DIR...
    scripts/record_commit.py --which      prints the commit a run here should record

`--which` is for the scripts that produce results (gpu_check.sh, gpu_experiments.sh,
data_bench.sh, tests/parallel/h200_parallel.sh): $COMMIT if set, else this checkout's HEAD,
as a full hash; where git cannot resolve it (the device machine gets a copy of the tree
without its history: pass COMMIT=$(git rev-parse HEAD) from the checkout) it warns and
prints `unknown`.

COMMIT is a commit of this repository (any form `git rev-parse` takes; it is written as
the full 40-hex hash) or `unknown` (then say why in the folder's README.md). Directories
are walked for the file kinds below; other files are left alone.

  *.jsonl  every record gets "commit": "<hash>" as its last field; the rest of each line is
           kept byte for byte (no re-serialisation, so numbers keep their digits)
  *.json   the object, or every object of a top-level list, gets the field
  *.csv    a last column `commit` (last, so readers that index columns are unaffected)
  *.txt    a line `commit: <hash>` at the end; a `commit` line that names a short hash or
           `HEAD` is replaced by it

A record (line, row, file) that already names a commit, or `unknown`, is left as it is:
only what lacks one is stamped, so a folder of runs from several trees can be stamped run by
run. Exit 0 done, 1 a file could not be stamped, 2 usage.
"""
import csv
import io
import json
import os
import re
import subprocess
import sys

FULL = re.compile(r"^[0-9a-f]{40}$")
TXT_LINE = re.compile(r"^commit(?::\s*|\s+)(\S+)")
KINDS = (".jsonl", ".json", ".csv", ".txt")


def git_commit(commit):
    """The full hash of `commit` in this repository, or None."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "-q",
                              commit + "^{commit}"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def resolve(commit):
    if commit == "unknown" or FULL.match(commit):
        return commit
    full = git_commit(commit)
    if full is None:
        sys.exit("record_commit.py: error: %s is not a commit of this repository (pass the "
                 "full hash, or 'unknown')" % commit)
    return full


def which():
    want = os.environ.get("COMMIT") or "HEAD"
    if want == "unknown" or FULL.match(want):
        return want
    full = git_commit(want)
    if full is None:
        print("record_commit.py: warning: git cannot resolve %s here (a copy of the tree "
              "without its history?); the results will say commit unknown: pass "
              "COMMIT=<full hash>" % want, file=sys.stderr)
        return "unknown"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if want == "HEAD" and subprocess.run(["git", "-C", repo, "diff", "--quiet", "HEAD"]).returncode:
        print("record_commit.py: warning: the tree has uncommitted changes; the results will "
              "name HEAD (%s), which is not quite what ran" % full[:12], file=sys.stderr)
    return full


def stamp_jsonl(path, commit):
    lines = open(path, encoding="utf-8").read().splitlines(keepends=True)
    out = []
    for n, line in enumerate(lines, 1):
        body = line.rstrip("\r\n")
        if not body.strip():
            out.append(line)
            continue
        rec = json.loads(body)
        if not isinstance(rec, dict):
            raise ValueError("line %d is not a JSON object" % n)
        if "commit" in rec:
            out.append(line)
            continue
        end = body.rstrip()
        assert end.endswith("}")
        spaced = '": ' in end  # json.dumps style ("a": 1, "b": 2) or compact ("a":1,"b":2)
        field = ('"commit": "%s"' if spaced else '"commit":"%s"') % commit
        sep = "" if rec == {} else (", " if spaced else ",")
        new = end[:-1].rstrip() + sep + field + "}"
        check = json.loads(new)
        if check.pop("commit") != commit or check != rec:
            raise ValueError("line %d changed beyond the commit field" % n)
        out.append(new + line[len(body):] + ("" if line.endswith("\n") else "\n"))
    return "".join(out)


def stamp_json(path, commit):
    data = json.load(open(path, encoding="utf-8"))
    records = data if isinstance(data, list) else [data]
    if not all(isinstance(rec, dict) for rec in records):
        raise ValueError("not a JSON object or a list of objects")
    if all("commit" in rec for rec in records):
        return None
    for rec in records:
        rec.setdefault("commit", commit)
    return json.dumps(data, indent=1) + "\n"


def stamp_csv(path, commit):
    text = open(path, encoding="utf-8", newline="").read()
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise ValueError("empty")
    header = rows[0]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header and header[-1] == "commit":  # fill the rows whose cell is empty
        if all(r[-1] for r in rows[1:] if r):
            return None
        w.writerow(header)
        for r in rows[1:]:
            w.writerow(r[:-1] + [r[-1] or commit] if r else r)
    else:
        if "commit" in header:
            raise ValueError("a commit column that is not the last one")
        w.writerow(header + ["commit"])
        for r in rows[1:]:
            w.writerow(r + [commit] if r else r)
    return buf.getvalue()


def stamp_txt(path, commit):
    lines = open(path, encoding="utf-8").read().splitlines()
    for i, line in enumerate(lines):
        m = TXT_LINE.match(line)
        if not m:
            continue
        if FULL.match(m.group(1)) or m.group(1) == "unknown" and line.startswith("commit:"):
            return None
        lines[i] = "commit: %s" % commit  # a short hash or HEAD: made exact
        return "\n".join(lines) + "\n"
    return "\n".join(lines + ["commit: %s" % commit]) + "\n"


STAMP = {".jsonl": stamp_jsonl, ".json": stamp_json, ".csv": stamp_csv, ".txt": stamp_txt}


def files(args):
    for a in args:
        if os.path.isdir(a):
            for root, _, names in sorted(os.walk(a)):
                for name in sorted(names):
                    if name.endswith(KINDS):
                        yield os.path.join(root, name)
        else:
            yield a


def main(argv):
    if argv == ["--which"]:
        print(which())
        return 0
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    commit = resolve(argv[0])
    rc = 0
    for path in files(argv[1:]):
        ext = os.path.splitext(path)[1]
        if ext not in STAMP:
            print("record_commit.py: %s: not a results file kind (%s)" % (path, ", ".join(KINDS)),
                  file=sys.stderr)
            rc = 1
            continue
        try:
            new = STAMP[ext](path, commit)
        except (OSError, ValueError) as e:
            print("record_commit.py: %s: %s" % (path, e), file=sys.stderr)
            rc = 1
            continue
        if new is not None and new != open(path, encoding="utf-8", newline="").read():
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(new)
            print("record_commit.py: %s: commit %s" % (path, commit))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
