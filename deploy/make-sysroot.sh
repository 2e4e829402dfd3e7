#!/usr/bin/env bash
# Build a cross sysroot for arm64 or armhf from Debian's own packages.
#
#   deploy/make-sysroot.sh arm64|armhf [DIR]     (default DIR: build/sysroot/<arch>)
#
# The :arm64/:armhf -dev packages of deploy/install-deps.sh, their runtime
# libraries and libc are downloaded with apt-get and unpacked (dpkg -x) into
# DIR rather than installed with multiarch: a host whose amd64 libraries come
# from bookworm-security cannot co-install foreign ones of another version,
# and the build does not need them installed, only present. The toolchain
# files in deploy/toolchains/ use DIR as CMAKE_SYSROOT and qemu's -L prefix.
# Idempotent: a finished sysroot (DIR/.complete) is left as it is.
set -euo pipefail

arch=${1:?usage: make-sysroot.sh arm64|armhf [DIR]}
here=$(cd "$(dirname "$0")" && pwd)
dir=${2:-$here/../build/sysroot/$arch}
case "$arch" in
arm64 | armhf) ;;
*) echo "make-sysroot: unknown architecture '$arch'" >&2; exit 2 ;;
esac
[ -f "$dir/.complete" ] && { echo "make-sysroot: $dir is ready"; exit 0; }

LIBS=$(bash "$here/install-deps.sh" --list-libs)
roots="libc6-dev:$arch"
for lib in $LIBS; do roots="$roots $lib:$arch"; done

grep -qx "$arch" <<<"$(dpkg --print-foreign-architectures)" || {
    [ "$(id -u)" -eq 0 ] || { echo "make-sysroot: run as root once: dpkg --add-architecture $arch && apt-get update" >&2; exit 1; }
    dpkg --add-architecture "$arch"
    apt-get update -qq || true
}
# shellcheck disable=SC2086
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances $roots 2>/dev/null | grep "^[a-z0-9].*:$arch\$" | sort -u)
[ -n "$pkgs" ] || { echo "make-sysroot: apt knows no $arch packages; run apt-get update" >&2; exit 1; }

debs=$(mktemp -d)
chmod 755 "$debs" # apt downloads as the _apt user
trap 'rm -rf "$debs"' EXIT
# shellcheck disable=SC2086
(cd "$debs" && apt-get download -qq $pkgs)
rm -rf "$dir"
mkdir -p "$dir"
for deb in "$debs"/*.deb; do dpkg -x "$deb" "$dir"; done
# Absolute symlinks (libfoo.so -> /lib/...) must resolve inside the sysroot.
find "$dir" -type l | while read -r link; do
    target=$(readlink "$link")
    case "$target" in /*) ln -sfr "$dir$target" "$link" ;; esac
done
touch "$dir/.complete"
echo "make-sysroot: $arch sysroot ready in $dir ($(echo "$pkgs" | wc -l) packages)"
