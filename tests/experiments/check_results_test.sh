#!/usr/bin/env bash
# scripts/check_results.sh can fail: on crafted results trees it passes a complete one and
# fails, naming the file, on each single defect (a JSON-lines record without a commit, a
# CSV without the column or with an empty cell, a text result without a commit line, a
# short hash, a hash that is no commit of this repository, one on no branch, "unknown" with no reason given).
#
#   check_results_test.sh     (exit 0 pass, 1 fail)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHECK=$ROOT/scripts/check_results.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A commit of this repository where there is history, else any 40-hex string (the check
# then cannot look hashes up, and the "not a commit" case is left out).
have_history=0
if H=$(git -C "$ROOT" rev-parse --verify -q HEAD) &&
   [ "$(git -C "$ROOT" rev-parse --is-shallow-repository)" = false ]; then
  have_history=1
else
  H=0123456789abcdef0123456789abcdef01234567
fi

# good DIR: a complete results tree, every kind of file, records in both JSON styles.
good() {
  mkdir -p "$1/exp/run"
  printf '{"kind":"train","step":1,"loss":2.3,"commit":"%s"}\n' "$H" > "$1/exp/run/metrics.jsonl"
  printf '{"kind":"eval","step":1,"commit":"%s"}\n' "$H" >> "$1/exp/run/metrics.jsonl"
  printf '{"impl": "x", "img_per_s": 1.5, "commit": "%s"}\n' "$H" > "$1/exp/run/results.jsonl"
  printf 'a,b,commit\n1,2,%s\n3,4,%s\n' "$H" "$H" > "$1/exp/run/table.csv"
  printf 'step 1 loss 2.3\ncommit: %s\n' "$H" > "$1/exp/run/output.txt"
  printf '{"a": 1, "commit": "%s"}\n' "$H" > "$1/exp/run/one.json"
  printf '{"a":1,"commit":"unknown"}\n' > "$1/exp/old.jsonl"
  printf '# exp\n\nold.jsonl: commit unknown, the run kept no record of its tree.\n' \
    > "$1/exp/README.md"
}

# expect_fail NAME FILE_PART: the check fails on tree $work/NAME and names FILE_PART.
expect_fail() {
  local out
  out=$("$CHECK" "$work/$1/exp" 2>&1) && fail "$1: the check passed: $out"
  grep -q -- "$2" <<<"$out" || fail "$1: the message does not name $2: $out"
  echo "ok: $1 fails: $(grep -m1 -- "$2" <<<"$out")"
}

good "$work/good"
out=$("$CHECK" "$work/good/exp" 2>&1) || fail "a complete tree fails the check: $out"
echo "ok: a complete tree passes"

good "$work/jsonl_record"  # one record of three without a commit
printf '{"kind":"train","step":2,"loss":2.2}\n' >> "$work/jsonl_record/exp/run/metrics.jsonl"
expect_fail jsonl_record "run/metrics.jsonl: 1 of 3 records have no commit"

good "$work/csv_column"
printf 'a,b\n1,2\n' > "$work/csv_column/exp/run/table.csv"
expect_fail csv_column "run/table.csv"

good "$work/csv_cell"
printf '5,6,\n' >> "$work/csv_cell/exp/run/table.csv"
expect_fail csv_cell "run/table.csv: row 4 has no commit"

good "$work/txt_line"
printf 'step 1 loss 2.3\n' > "$work/txt_line/exp/run/output.txt"
expect_fail txt_line "run/output.txt"

good "$work/json_field"
printf '{"a": 1}\n' > "$work/json_field/exp/run/one.json"
expect_fail json_field "run/one.json"

good "$work/short_hash"
printf '{"impl": "x", "commit": "%s"}\n' "${H:0:7}" > "$work/short_hash/exp/run/results.jsonl"
expect_fail short_hash "run/results.jsonl: commit '${H:0:7}' is not a full 40-hex hash"

if [ $have_history = 1 ]; then
  good "$work/no_such_commit"
  none=0000000000000000000000000000000000000001
  printf 'commit: %s\n' $none > "$work/no_such_commit/exp/run/output.txt"
  expect_fail no_such_commit "run/output.txt: commit $none is not in this repository"

  # A commit that exists but is on no branch: written to an object store of the test's
  # own, which git reads together with the repository's (the repository is not touched).
  mkdir -p "$work/objects"
  objects=$(cd "$ROOT" && cd "$(git rev-parse --git-path objects)" && pwd)
  export GIT_OBJECT_DIRECTORY=$work/objects GIT_ALTERNATE_OBJECT_DIRECTORIES=$objects
  side=$(git -C "$ROOT" -c user.name=t -c user.email=t@t commit-tree -p "$H" \
           -m "side tree" "$H^{tree}") || fail "could not write a side commit"
  good "$work/side_commit"
  printf 'commit: %s\n' "$side" > "$work/side_commit/exp/run/output.txt"
  expect_fail side_commit "run/output.txt: commit $side is not in this repository's history: no ancestor of HEAD"
  unset GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
fi

good "$work/unknown_unexplained"
printf '# exp\n' > "$work/unknown_unexplained/exp/README.md"
expect_fail unknown_unexplained "old.jsonl: commit 'unknown' without"

# scripts/record_commit.py mends a tree: it stamps the record, the row and the file that
# lacked a commit, keeps every other byte of them, and never overwrites a recorded commit.
STAMP=(python3 "$ROOT/scripts/record_commit.py")
for t in jsonl_record csv_cell txt_line; do
  "${STAMP[@]}" "$H" "$work/$t/exp" >/dev/null || fail "record_commit.py failed on $t"
  out=$("$CHECK" "$work/$t/exp" 2>&1) || fail "$t still fails after record_commit.py: $out"
done
grep -qx '{"kind":"train","step":2,"loss":2.2,"commit":"'"$H"'"}' \
  "$work/jsonl_record/exp/run/metrics.jsonl" ||
  fail "record_commit.py changed the record beyond its commit field"
grep -qx "5,6,$H" "$work/csv_cell/exp/run/table.csv" ||
  fail "record_commit.py did not fill the empty cell"
cp -r "$work/good" "$work/restamped"
"${STAMP[@]}" 0123456789abcdef0123456789abcdef01234567 "$work/restamped/exp" >/dev/null ||
  fail "record_commit.py failed on a complete tree"
diff -r "$work/good" "$work/restamped" >/dev/null || fail "record_commit.py overwrote a commit"
echo "ok: record_commit.py stamps what lacks a commit and leaves recorded ones alone"

echo "PASS"
