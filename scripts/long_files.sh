#!/usr/bin/env bash
# House rule (issue 33): no source file of src/ or dev/ over 900 lines unless its first 10
# lines say why ("long because ..."). A file that grows past the limit is a sign that it
# holds more than one thing: split it by op family, phase or format before it does.
#
#   scripts/long_files.sh [ROOT]   exit 0: none; 1: the files over the limit are listed
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
LIMIT=900
bad=0
while IFS= read -r f; do
  n=$(wc -l < "$f")
  if [ "$n" -gt "$LIMIT" ] && ! head -10 "$f" | grep -q "long because"; then
    echo "${f#"$ROOT"/}: $n lines (limit $LIMIT; split it, or say 'long because ...' in its first 10 lines)"
    bad=1
  fi
done < <(find "$ROOT/src" "$ROOT/dev" -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \
  -o -name '*.cuh' \) | sort)
[ $bad -eq 0 ] && echo "every source file of src/ and dev/ is at most $LIMIT lines (or says why)"
exit $bad
