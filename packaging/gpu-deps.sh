#!/usr/bin/env bash
# Fetch the small libraries a GPU server may lack (nlohmann-json headers, PCRE2; patchelf for
# `cmake --install`, docs/packaging.md) as
# Debian 12 packages and unpack them into a folder, for machines with no network or no
# root: copy the folder along and pass -DODYSSEY_DEPS_PREFIX=<folder> to CMake.
#
#   packaging/gpu-deps.sh [DIR]     (default: .gpu-deps)
#
# Run on a Debian 12 machine with apt; the libraries' ABI matches Ubuntu 24.04's.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu-deps}
mkdir -p "$dir/debs"
(cd "$dir/debs" && apt-get download -q nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 patchelf)
for d in "$dir"/debs/*.deb; do dpkg -x "$d" "$dir"; done
echo "gpu-deps: unpacked into $dir; configure with -DODYSSEY_DEPS_PREFIX=$(cd "$dir" && pwd)"
