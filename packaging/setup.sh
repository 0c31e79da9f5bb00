#!/usr/bin/env bash
# The README's two commands, on a fresh Debian 12 machine or an existing checkout:
#
#   bash packaging/setup.sh quickstart   install, build, run the embedded default job (in the
#                                        window when a display is available)
#   bash packaging/setup.sh test         install, build (warnings as errors), run every test
#   bash packaging/setup.sh package      build the Debian package (build/package/dist/*.deb)
#
# All install what is missing first (packaging/install-deps.sh) and are safe to repeat.
# Environment: ODYSSEY_HEADLESS=1 (quickstart without the window), ODYSSEY_VENV (LibTorch
# virtual environment), ODYSSEY_FUZZ_SECONDS (per fuzzer in `test`, default 60; 0 skips
# fuzzing), ODYSSEY_JOBS (parallel compile jobs), ODYSSEY_PACKAGE_TEST (0 skips the package
# install test in `test`), ODYSSEY_MIN_FREE_GIB (free disk required before starting; 0 skips
# the check).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-}
case "$mode" in
  quickstart|test|package) ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
shift || true

# Free disk first: a build that runs out of space fails half an hour in, deep inside cpack or
# the linker, with a message about a truncated file (a CI run died so in `cpack`). The figures
# are what the trees took on this project's CI: `test` builds four trees (Debug, sanitizers,
# fuzzers, the package: 14 GiB in a fresh clone), `package` one Release tree and the .deb,
# `quickstart` one Release tree; LibTorch's virtual environment takes 6 GiB more the first time.
need_gib=${ODYSSEY_MIN_FREE_GIB:-}
if [ -z "$need_gib" ]; then
  case "$mode" in test) need_gib=16 ;; package) need_gib=8 ;; *) need_gib=6 ;; esac
  [ -x "${ODYSSEY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/odyssey/venv-torch-${ODYSSEY_TORCH:-2.11.0}}/bin/python" ] ||
    need_gib=$((need_gib + 6))
fi
free_gib=$(( $(df -Pk "$root" | awk 'NR == 2 { print $4 }') / 1048576 ))
if [ "$need_gib" -gt 0 ] && [ "$free_gib" -lt "$need_gib" ]; then
  echo "setup: $root has $free_gib GiB of free disk; \`setup.sh $mode\` needs about $need_gib GiB" \
    "(build trees under build/, LibTorch's environment under ~/.cache/odyssey)." \
    "Free some space, or set ODYSSEY_MIN_FREE_GIB=0 to try anyway." >&2
  exit 1
fi

bash packaging/install-deps.sh

torch_version=${ODYSSEY_TORCH:-2.11.0}
venv=${ODYSSEY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/odyssey/venv-torch-$torch_version}
torch_prefix=$("$venv/bin/python" -W ignore -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
jobs=${ODYSSEY_JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccache}
# Four build trees (Debug with LibTorch, sanitizers, fuzzers, the Release package) with
# precompiled LibTorch headers need about 8 GB; at 5 GB the cache evicted itself and CI
# rebuilt most of the Release tree every run.
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-12G}
# Fresh clones in other folders (CI) share the cache: paths are made relative to the
# checkout and the working directory is left out of the hash.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}

swift_venv=${ODYSSEY_SWIFT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/odyssey/venv-swift-4.6.0}
configure() {  # configure <build dir> <extra cmake args...>
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" -DODYSSEY_PYTHON="$venv/bin/python" \
    -DODYSSEY_SWIFT_PYTHON="$([ -x "$swift_venv/bin/python" ] && echo "$swift_venv/bin/python")" "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log"; echo "setup: configuring $dir failed" >&2; exit 1; }
}

# Each step prints how long the one before it took, so a slow CI run shows where the time went.
step_start=
step() {
  [ -n "$step_start" ] && printf -- '-- step took %d s\n' $(( $(date +%s) - step_start ))
  step_start=$(date +%s)
  printf '\n== %s\n' "$*"
}
# has_target <build dir> <target>: whether the configured tree offers the target. The list is
# read whole first: under pipefail, `cmake --build … --target help | grep -q` fails whenever grep
# exits before cmake has written the rest (cmake then dies of SIGPIPE): a race, which left the
# window out of one CI run's package build (its install then found no bin/odyssey).
has_target() {
  local help
  help=$(cmake --build "$1" --target help 2>/dev/null || true)
  grep -q "^$2:" <<<"$help"
}

if [ "$mode" = quickstart ]; then
  mkdir -p build
  configure build/release -DCMAKE_BUILD_TYPE=Release -DODYSSEY_BUILD_TESTS=OFF
  targets=(odyssey-train)
  # The window too, where this machine has what it needs (Qt 6 Widgets, QCustomPlot).
  if has_target build/release odyssey; then targets+=(odyssey); fi
  step "building ${targets[*]} (release)"
  cmake --build build/release -j "$jobs" --target "${targets[@]}"
  gui=build/release/app/odyssey
  if [ $# -eq 0 ] && [ -x "$gui" ] && [ -z "${ODYSSEY_HEADLESS:-}" ] &&
     { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
    step "odyssey --start   (the window trains the embedded quickstart and follows it on the Monitor)"
    exec "$gui" --start
  fi
  step "odyssey-train run   (the embedded quickstart preset)"
  set +e
  build/release/app/odyssey-train run "$@"
  rc=$?
  set -e
  if [ -x "$gui" ]; then
    printf '\nTo follow runs in the window (it needs a display): %s   (Monitor tab: the runs in ./output)\n' "$gui"
    printf 'With a display, `bash packaging/setup.sh quickstart` opens it and trains there (ODYSSEY_HEADLESS=1: no window).\n'
  fi
  exit $rc
fi

# The Debian package: a Release build of the two programs (LibTorch bundled beside them,
# packaging/CMakeLists.txt), made by CPack. `install` builds only what it installs.
build_package() {
  mkdir -p build
  configure build/package -DCMAKE_BUILD_TYPE=Release -DODYSSEY_BUILD_TESTS=OFF -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON
  local targets=(odyssey-train)
  if has_target build/package odyssey; then targets+=(odyssey); fi
  if has_target build/package odyssey_man_pages; then targets+=(odyssey_man_pages); fi
  step "building ${targets[*]} (release, for the package)"
  cmake --build build/package -j "$jobs" --target "${targets[@]}"
  step "cpack -G DEB"
  rm -rf build/package/dist
  (cd build/package && cpack -G DEB -B "$root/build/package/dist" >cpack.log 2>&1) || {
    tail -30 build/package/cpack.log; echo "setup: cpack failed (build/package/cpack.log)" >&2; exit 1; }
  rm -rf build/package/dist/_CPack_Packages
  ls -l build/package/dist/*.deb
}

if [ "$mode" = package ]; then
  build_package
  printf '
Install it with: sudo apt install ./%s
' "$(ls build/package/dist/*.deb)"
  exit 0
fi

# test: the same command CI runs (.ci/run).
start=$(date +%s)
mkdir -p build
step "format: every C++/CUDA file as .clang-format says (clang-format 14)"
bash packaging/check-format.sh
step "build + unit tests (Debug, warnings as errors, LibTorch when installed)"
configure build/ci -DCMAKE_BUILD_TYPE=Debug -DODYSSEY_WERROR=ON
cmake --build build/ci -j "$jobs"
(cd build/ci && ctest --output-on-failure -j "$jobs" -LE gpu)

step "address + undefined-behaviour sanitizers (core, no LibTorch)"
configure build/asan -DCMAKE_BUILD_TYPE=Debug -DODYSSEY_WERROR=ON -DODYSSEY_WITH_TORCH=OFF -DODYSSEY_WITH_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build build/asan -j "$jobs"
(cd build/asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -LE 'gpu|slow')

fuzz_seconds=${ODYSSEY_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" != 0 ]; then
  step "fuzzing: each libFuzzer target for ${fuzz_seconds}s"
  configure build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" -DODYSSEY_BUILD_FUZZERS=ON \
    -DODYSSEY_BUILD_TESTS=OFF -DODYSSEY_BUILD_GUI=OFF -DODYSSEY_BUILD_ENGINE=OFF -DODYSSEY_WITH_TORCH=OFF -DODYSSEY_WITH_CUDA=OFF
  cmake --build build/fuzz -j "$jobs"
  # One fuzzer per core at a time: each is single-threaded, and fuzzing them one after
  # another left the other cores idle for minutes.
  fuzz_one() {  # fuzz_one <binary>: run it, print its stats; on failure keep input and log
    local f=$1 name work rc
    name=$(basename "$f")
    work=$(mktemp -d)
    cp -r "tests/fuzz/corpus/$name/." "$work/" 2>/dev/null || true
    set +e
    (cd "$work" && "$root/$f" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$work" >"$work.log" 2>&1)
    rc=$?
    set -e
    { echo "-- $name"; grep -E 'stat::number_of_executed_units|Done|ERROR|SUMMARY' "$work.log" || true; }
    if [ "$rc" -ne 0 ]; then
      tail -30 "$work.log"
      echo "setup: $name failed (exit $rc: crash, leak, timeout or out of memory); input and log kept in $work" >&2
      return 1
    fi
    rm -f "$work.log"
    rm -rf "$work"
  }
  pids=()
  fuzz_failed=0
  for f in build/fuzz/tests/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    if [ "${#pids[@]}" -ge "$jobs" ]; then
      wait "${pids[0]}" || fuzz_failed=1
      pids=("${pids[@]:1}")
    fi
    fuzz_one "$f" > "build/fuzz/$(basename "$f").out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fuzz_failed=1; done
  cat build/fuzz/fuzz_*.out
  rm -f build/fuzz/fuzz_*.out
  [ "$fuzz_failed" = 0 ] || exit 1
fi
if [ "${ODYSSEY_PACKAGE_TEST:-1}" != 0 ]; then
  step "the Debian package: build it, install it into a fresh Debian 12 root, run it, purge it"
  build_package
  as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: the package test needs root (chroot); run as root, or ODYSSEY_PACKAGE_TEST=0 to skip it" >&2; exit 1; }
    as_root=(sudo)
  fi
  "${as_root[@]}" bash packaging/test-package.sh build/package/dist/*.deb
fi

step "done"
echo "setup: all tests passed in $(( $(date +%s) - start )) s"
