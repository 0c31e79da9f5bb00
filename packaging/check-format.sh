#!/usr/bin/env bash
# Whether every tracked C++/CUDA file is formatted as .clang-format says. clang-format 14 is
# the version Debian 12 ships (packaging/install-deps.sh installs it); other versions format
# some constructs differently, so the check insists on 14.
#
#   bash packaging/check-format.sh         check (exit 1 and the files that differ)
#   bash packaging/check-format.sh --fix   format them in place
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$cf" ] || { echo "check-format: clang-format 14 is not installed (bash packaging/install-deps.sh)" >&2; exit 1; }
version=$("$cf" --version)
case "$version" in
  *"version 14."*) ;;
  *) echo "check-format: $cf is \"$version\"; the tree is formatted with clang-format 14" >&2; exit 1 ;;
esac
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = --fix ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check-format: not formatted as .clang-format says: %s\n' "${bad[@]}" >&2
  echo "check-format: bash packaging/check-format.sh --fix formats them" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
