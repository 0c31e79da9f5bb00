#!/usr/bin/env bash
# Installs the Debian package into a fresh Debian 12 root and checks that it runs there with
# nothing but the package and the dependencies it declares (docs/packaging.md):
#
#   packaging/test-package.sh odyssey_<version>_amd64.deb
#
#  1. the package's metadata: AppStream metainfo (appstreamcli validate), desktop entry
#     (desktop-file-validate), MIME XML, man pages and completion present;
#  2. a fresh root: debootstrap --variant=minbase bookworm (cached as a tarball under
#     ${XDG_CACHE_HOME:-~/.cache}/odyssey; a new root is unpacked from it every run);
#  3. a truncated copy of the .deb is refused by dpkg and leaves nothing installed;
#  4. `apt-get install --no-install-recommends ./odyssey_*.deb` pulls the declared
#     dependencies from the Debian mirror; `odyssey-train run` trains the installed
#     quickstart to its last step, `odyssey --version` and a window screenshot run offscreen,
#     bash completion completes a command;
#  5. `apt-get purge --autoremove odyssey` leaves the root's file list as it was before.
#
# Needs root (chroot, mounts), debootstrap and network access to the Debian mirror.
# ODYSSEY_KEEP_ROOT=1 keeps the root for inspection.
set -euo pipefail

deb=${1:?usage: packaging/test-package.sh odyssey_VERSION_amd64.deb}
[ -f "$deb" ] || { echo "test-package: $deb: no such file" >&2; exit 2; }
deb=$(realpath "$deb")
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "test-package: needs root (chroot and mounts)" >&2; exit 2; }
for t in debootstrap dpkg-deb appstreamcli desktop-file-validate xmllint; do
  command -v "$t" >/dev/null || { echo "test-package: $t is missing (packaging/install-deps.sh installs it)" >&2; exit 2; }
done

mirror=${ODYSSEY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/odyssey
base_tar=$cache/debootstrap-bookworm-minbase.tar
work=$(mktemp -d /var/tmp/odyssey-package-test.XXXXXX)
root=$work/root
mounted=()
cleanup() {
  local m
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if [ -z "${ODYSSEY_KEEP_ROOT:-}" ]; then rm -rf "$work"; else echo "test-package: root kept in $root"; fi
}
trap cleanup EXIT
fail() { echo "test-package: FAILED: $*" >&2; exit 1; }
step() { printf '\n-- %s\n' "$*"; }
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

step "package metadata: $(basename "$deb") ($(du -h "$deb" | cut -f1))"
dpkg-deb --info "$deb" | sed -n '/Package:/p;/Version:/p;/Depends:/p;/Installed-Size:/p'
contents=$work/contents
mkdir -p "$contents"
dpkg-deb -x "$deb" "$contents"
for f in usr/bin/odyssey-train usr/bin/odyssey usr/share/man/man1/odyssey-train.1 usr/share/man/man1/odyssey.1 \
         usr/share/bash-completion/completions/odyssey-train usr/share/applications/odyssey.desktop \
         usr/share/mime/packages/odyssey.xml usr/share/metainfo/io.github.odyssey_llm.Odyssey.metainfo.xml \
         usr/share/icons/hicolor/scalable/apps/odyssey.svg usr/share/odyssey/presets/quickstart.yaml \
         usr/lib/odyssey/libtorch_cpu.so; do
  [ -e "$contents/$f" ] || fail "the package lacks /$f"
done
appstreamcli validate --no-net "$contents/usr/share/metainfo/io.github.odyssey_llm.Odyssey.metainfo.xml" ||
  fail "appstreamcli rejects the metainfo"
desktop-file-validate "$contents/usr/share/applications/odyssey.desktop" || fail "desktop-file-validate rejects the entry"
xmllint --noout "$contents/usr/share/mime/packages/odyssey.xml" || fail "the MIME XML does not parse"
grep -q '^MimeType=application/x-odyssey-preset;$' "$contents/usr/share/applications/odyssey.desktop" ||
  fail "the desktop entry claims other MIME types than Odyssey presets"
for f in "$contents"/usr/bin/*; do
  rp=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [ "$rp" = '$ORIGIN/../lib/odyssey' ] || fail "$(basename "$f") has RUNPATH '$rp', expected \$ORIGIN/../lib/odyssey"
done
rm -rf "$contents"

step "a fresh Debian 12 root (debootstrap minbase)"
mkdir -p "$cache" "$root"
if [ ! -s "$base_tar" ]; then
  debootstrap --variant=minbase bookworm "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; fail "debootstrap failed"; }
  tar -C "$work/base" -cf "$base_tar.tmp" . && mv "$base_tar.tmp" "$base_tar"
  rm -rf "$work/base"
fi
tar -C "$root" -xf "$base_tar"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --bind /dev "$root/dev" && mounted+=("$root/dev")
mkdir -p "$root/mnt/deb"
mount --bind "$(dirname "$deb")" "$root/mnt/deb" && mounted+=("$root/mnt/deb")
in_root apt-get update -q >"$work/apt-update.log" 2>&1 || { tail -20 "$work/apt-update.log"; fail "apt-get update in the root failed"; }
# The root's files, without the package manager's own state and caches, and without the
# home folder: what a user's runs write there (runs, the tokenization cache, the window's
# settings) is the user's, and no package removes it.
snapshot() {
  (cd "$root" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./mnt -o -path ./tmp -o -path ./var/cache \
     -o -path ./var/lib/apt -o -path ./var/lib/dpkg -o -path ./var/log -o -path ./root \) -prune -o -print | sort)
}
snapshot >"$work/before.txt"

step "a truncated package is refused and installs nothing"
size=$(stat -c %s "$deb")
head -c $((size / 2)) "$deb" >"$root/tmp/truncated.deb"
if in_root dpkg -i /tmp/truncated.deb >"$work/truncated.log" 2>&1; then fail "dpkg installed a truncated package"; fi
grep -m2 -iE 'error|unexpected end|corrupt' "$work/truncated.log" || true
in_root dpkg-query -W -f='${Status}' odyssey 2>/dev/null | grep -q "install ok installed" &&
  fail "the truncated package left odyssey installed"
[ ! -e "$root/usr/bin/odyssey-train" ] || fail "the truncated package left /usr/bin/odyssey-train"
rm -f "$root/tmp/truncated.deb"
in_root dpkg --purge odyssey >/dev/null 2>&1 || true   # a half-unpacked entry, if dpkg kept one

step "apt-get install ./$(basename "$deb") (dependencies from the mirror)"
t0=$(date +%s)
in_root apt-get install -y -q --no-install-recommends "/mnt/deb/$(basename "$deb")" >"$work/install.log" 2>&1 ||
  { tail -30 "$work/install.log"; fail "apt-get install failed"; }
grep -E '^(Setting up|Unpacking) odyssey' "$work/install.log" | head -2
echo "installed in $(( $(date +%s) - t0 )) s; $(grep -c '^Setting up' "$work/install.log") packages set up"

step "odyssey-train run (the installed quickstart) in the fresh root"
in_root odyssey-train --version
in_root odyssey-train env | head -4
mkdir -p "$root/root/work"
in_root sh -c 'cd /root/work && odyssey-train run --name installed' >"$work/run.log" 2>&1 ||
  { tail -30 "$work/run.log"; fail "odyssey-train run failed in the fresh root"; }
tail -3 "$work/run.log"
run_dir=$(ls -d "$root"/root/work/output/*-installed 2>/dev/null | head -1)
[ -n "$run_dir" ] || fail "odyssey-train run wrote no run directory under /root/work/output"
grep -q '"state": *"completed"' "$run_dir/status.json" || fail "the run did not complete: $(cat "$run_dir/status.json")"
ls "$run_dir" | tr '\n' ' '; echo

step "odyssey (the window) offscreen"
in_root env QT_QPA_PLATFORM=offscreen odyssey --version
in_root sh -c 'cd /root/work && QT_QPA_PLATFORM=offscreen ODYSSEY_SCREENSHOT_SIZE=1366x768 odyssey --screenshot /root/work/shots' \
  >"$work/shot.log" 2>&1 || { tail -20 "$work/shot.log"; fail "odyssey --screenshot failed in the fresh root"; }
n=$(ls "$root"/root/work/shots/*.png 2>/dev/null | wc -l)
[ "$n" -gt 0 ] || fail "odyssey --screenshot wrote no PNG"
echo "$n screenshots written"

step "bash completion"
got=$(in_root bash -c 'source /usr/share/bash-completion/completions/odyssey-train
  COMP_WORDS=(odyssey-train ex); COMP_CWORD=1; _odyssey_train; echo "${COMPREPLY[*]}"')
echo "odyssey-train ex<TAB> -> $got"
[[ " $got " == *" export "* && " $got " == *" export-swift "* ]] || fail "completion offered '$got'"

step "apt-get purge --autoremove odyssey leaves nothing behind"
rm -rf "$root/root/work"
in_root apt-get purge -y -q --autoremove odyssey >"$work/purge.log" 2>&1 || { tail -20 "$work/purge.log"; fail "purge failed"; }
snapshot >"$work/after.txt"
if ! diff "$work/before.txt" "$work/after.txt" >"$work/left.txt"; then
  head -30 "$work/left.txt"
  fail "the root differs after purge (lines above: < removed, > left behind)"
fi
echo "root identical to before the install ($(wc -l <"$work/before.txt") paths)"
echo
echo "test-package: all checks passed"
