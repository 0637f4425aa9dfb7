#!/usr/bin/env bash
# Applies the repository's .clang-format to every tracked C++ and CUDA source.
#   scripts/format.sh           formats the files in place
#   scripts/format.sh --check   changes nothing; lists the files that differ and exits 1 if any do
# Uses Debian's clang-format (scripts/install-deps.sh installs it); CLANG_FORMAT picks another binary.
# Vendored or generated files would be excluded below; the tree has none today (Cap'n Proto's
# generated code lives in the build directory).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac

clang_format="${CLANG_FORMAT:-clang-format}"
if ! command -v "$clang_format" >/dev/null; then
  echo "format: $clang_format not found (scripts/install-deps.sh installs clang-format)" >&2
  exit 2
fi

mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
if [[ $check -eq 0 ]]; then
  printf '%s\0' "${files[@]}" | xargs -0 -r "$clang_format" -i --style=file
  echo "format: ${#files[@]} files formatted with $($clang_format --version)"
  exit 0
fi

unformatted=()
for f in "${files[@]}"; do
  [[ -f "$f" ]] || continue  # deleted in the working tree, not yet in the index
  if ! "$clang_format" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
    unformatted+=("$f")
  fi
done
if [[ ${#unformatted[@]} -gt 0 ]]; then
  echo "format: ${#unformatted[@]} of ${#files[@]} files differ from .clang-format (run scripts/format.sh):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
echo "format: all ${#files[@]} files match .clang-format"
