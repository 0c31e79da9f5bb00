#!/usr/bin/env bash
# Fetch the small libraries a GPU server may lack (nlohmann-json headers, PCRE2, cudnn-frontend's
# headers; patchelf for
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
# cudnn-frontend's C++ headers (header-only; kernels/cudnn_attention.h) from its PyPI wheel:
# $dir/cudnn-frontend/include, which CMake finds through ODYSSEY_DEPS_PREFIX.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 -d "$dir/wheels" nvidia-cudnn-frontend==1.32.0
rm -rf "$dir/cudnn-frontend" && mkdir -p "$dir/cudnn-frontend"
python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith("include/")]' \
  "$(ls "$dir"/wheels/nvidia_cudnn_frontend-1.32.0-*.whl | head -1)" "$dir/cudnn-frontend"
echo "gpu-deps: unpacked into $dir; configure with -DODYSSEY_DEPS_PREFIX=$(cd "$dir" && pwd)"
