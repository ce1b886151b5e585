#!/usr/bin/env bash
# Every results file under experiments/ names the commit of the tree it measured (issue 12):
#   *.jsonl  every record has "commit": "<40-hex hash>"
#   *.csv    a last column `commit`, filled in on every row
#   *.json   a "commit" field
#   *.txt    a line `commit: <40-hex hash>`
# `unknown` is accepted in place of a hash only where the folder's README.md (or the
# nearest one above it) has a line naming the file and saying "unknown", i.e. says why.
# A hash must name a commit of HEAD's history (checked where the full history is there).
# scripts/record_commit.py writes these fields.
#
#   scripts/check_results.sh [DIR]      (default: experiments/ of this checkout)
#
# Exit 0: every file records its commit; 1: a file does not (each named on stderr).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/experiments}
[ -d "$DIR" ] || { echo "check_results.sh: no directory $DIR" >&2; exit 2; }
DIR=$(cd "$DIR" && pwd)
HASH='[0-9a-f]{40}'
bad=0
hashes=()
complain() { echo "check_results.sh: $1: $2" >&2; bad=1; }

# Prints the commit values a file records, one per record; complains about records without.
values() {
  local f=$1
  case $f in
  *.jsonl)
    awk 'NF == 0 { next }
      { n++ }
      !match($0, /"commit": ?"[^"]*"/) { if (!miss++) first = NR; next }
      { v = substr($0, RSTART, RLENGTH); sub(/.*: ?"/, "", v); sub(/"$/, "", v); print v }
      END { if (miss) printf "%d of %d records have no commit (the first: line %d)\n",
                             miss, n, first > "/dev/stderr"
            exit (miss > 0) }' "$f" ;;
  *.json)
    grep -oE '"commit": ?"[^"]*"' "$f" | sed -E 's/.*: ?"//; s/"$//' | grep . ||
      { echo "no commit field" >&2; return 1; } ;;
  *.csv)
    # The last column, so a quoted field with commas before it does not shift it.
    awk -F, 'NR == 1 && $NF != "commit" {
               print "the header does not end with a commit column" > "/dev/stderr"
               nohdr = 1; exit }
      NR == 1 || NF == 0 { next }
      $NF == "" { if (!miss++) printf "row %d has no commit\n", NR > "/dev/stderr"; next }
      { print $NF } END { exit (nohdr || miss > 0) }' "$f" ;;
  *.txt)
    grep -oE '^commit: ?[^ ]+' "$f" | sed -E 's/^commit: ?//' | grep . ||
      { echo "no 'commit: HASH' line" >&2; return 1; } ;;
  esac
}

# The README.md that documents FILE: in its folder or the nearest one above it.
readme_for() {
  local d
  d=$(dirname "$1")
  while [ "$d" != "/" ] && [ "$d" != "." ]; do
    [ -f "$d/README.md" ] && { echo "$d/README.md"; return; }
    [ "$d" = "$DIR" ] && return
    d=$(dirname "$d")
  done
}

err=$(mktemp)
trap 'rm -f "$err"' EXIT
while IFS= read -r -d '' f; do
  if ! vals=$(values "$f" 2>"$err"); then
    complain "${f#"$ROOT"/}" "$(head -n 1 "$err") (scripts/record_commit.py COMMIT FILE adds it)"
    continue
  fi
  while IFS= read -r v; do
    if [ -z "$v" ]; then
      continue
    elif [ "$v" = unknown ]; then
      readme=$(readme_for "$f")
      base=$(basename "$f")
      if [ -z "$readme" ] || ! grep -F "$base" "$readme" | grep -qi unknown; then
        complain "${f#"$ROOT"/}" \
          "commit 'unknown' without a line in its README.md naming $base and saying why"
      fi
    elif [[ ! $v =~ ^$HASH$ ]]; then
      complain "${f#"$ROOT"/}" "commit '$v' is not a full 40-hex hash"
    else
      hashes+=("$v ${f#"$ROOT"/}")
    fi
  done < <(printf '%s\n' "$vals" | sort -u)
done < <(find "$DIR" -type f \( -name '*.jsonl' -o -name '*.json' -o -name '*.csv' \
                               -o -name '*.txt' \) -print0 | sort -z)

# Every hash names a commit of HEAD's history (a clone without history cannot tell). Being
# in the object store is not enough: a commit left off every branch (a measured side tree)
# is there in the checkout that made it and in a local `git clone`, which copies objects,
# but not in a clone over a transport, such as CI's. Merge such a commit in (`git merge -s
# ours`) to keep it.
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 &&
   [ "$(git -C "$ROOT" rev-parse --is-shallow-repository)" = false ]; then
  while read -r h f; do
    [ -n "$h" ] || continue
    if ! git -C "$ROOT" cat-file -e "$h^{commit}" 2>/dev/null; then
      complain "$f" "commit $h is not in this repository's history"
    elif ! git -C "$ROOT" merge-base --is-ancestor "$h" HEAD; then
      complain "$f" "commit $h is not in this repository's history: no ancestor of HEAD, so a clone will lack it (keep it with 'git merge -s ours $h')"
    fi
  done < <(printf '%s\n' "${hashes[@]}" | sort -u -k1,1)
fi
[ $bad = 0 ] && echo "check_results.sh: every results file under $DIR records its commit"
exit $bad
