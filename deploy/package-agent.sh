#!/usr/bin/env bash
# Build the starling-agent Debian package for one architecture.
#
#   deploy/package-agent.sh amd64|arm64|armhf [BUILD_DIR]
#
# amd64 uses the `release` preset, arm64 the `aarch64` and armhf the `armhf`
# cross preset (deploy/toolchains/, with the sysroot of deploy/make-sysroot.sh,
# made on first configure). BUILD_DIR defaults to the preset's, build/<preset>;
# it is configured when it is not yet. The target `package-agent` builds only
# the agent and packs it with cpack (deploy/packaging/agent.cmake), running
# the binary once for its man page: a cross build needs qemu-user for that
# (deploy/install-deps.sh ARCH).
# Prints the path of build/<preset>/starling-agent_<version>_<arch>.deb.
set -euo pipefail

arch=${1:?usage: package-agent.sh amd64|arm64|armhf [BUILD_DIR]}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
case "$arch" in
amd64) preset=release ;;
arm64) preset=aarch64 ;;
armhf) preset=armhf ;;
*)
    echo "package-agent: unknown architecture '$arch' (amd64, arm64 or armhf)" >&2
    exit 2
    ;;
esac
if [ "$arch" = amd64 ] && [ "$(dpkg --print-architecture)" != amd64 ]; then
    echo "package-agent: amd64 is built natively; this host is $(dpkg --print-architecture)" >&2
    exit 2
fi
build=${2:-$src/build/$preset}

cd "$src"
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake --preset "$preset" -B "$build"
else
    # again: the build system must know `package-agent` before it is asked for
    # it (a build configured before the packaging existed, or an older one)
    cmake "$build" >/dev/null
fi
grep -qF "set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE \"$arch\")" "$build/CPackConfig.cmake" || {
    echo "package-agent: $build is not a build for $arch (see its CPackConfig.cmake)" >&2
    exit 1
}
cmake --build "$build" --target package-agent -j2
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
deb=$build/starling-agent_${version}_$arch.deb
[ -f "$deb" ] || {
    echo "package-agent: cpack did not make $deb" >&2
    exit 1
}
echo "$deb"
