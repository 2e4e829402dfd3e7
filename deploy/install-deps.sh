#!/usr/bin/env bash
# Install the Debian packages Starling needs to build, test and run its demo.
#
#   deploy/install-deps.sh            native build (x86-64 or the host's arch)
#   deploy/install-deps.sh arm64      also the aarch64 cross compiler and qemu-user
#   deploy/install-deps.sh armhf      also the armv7 cross compiler and qemu-user
#   deploy/install-deps.sh --bench    also the benchmarks' peers: OpenBLAS, PyTorch (large)
#   deploy/install-deps.sh --list-libs   print the -dev library packages (for make-sysroot.sh)
#
# The :arm64/:armhf libraries themselves go into a sysroot that
# deploy/make-sysroot.sh builds from the same list.
#
# Idempotent: installs only what is missing. As a non-root user it prints the
# exact command to run and exits 1 without changing anything.
set -euo pipefail

# The one list: build tools, libraries (-dev), test framework, data set.
TOOLS="build-essential cmake pkg-config clang-format curl openssl python3-yaml chromium iproute2 nftables gnuplot-nox"
LIBS="libcurl4-openssl-dev libmicrohttpd-dev libmbedtls-dev libzstd-dev libsqlite3-dev libcjson-dev zlib1g-dev libcmocka-dev libpng-dev libjpeg62-turbo-dev libminizip-dev"
# The operator's side only (ONNX import and export in the `starling` CLI, its tests): native
# builds, never the agents' sysroots.
OPERATOR="protobuf-c-compiler libprotobuf-c-dev libonnx-dev python3-onnx"
# The coordinator's store on PostgreSQL (replicas, storage/pg) and its tests' throwaway
# cluster (initdb, pg_ctl): native builds only, never the agents'.
SERVER="libpq-dev postgresql"
# Real data: Fashion-MNIST; the CSVs python3-sklearn installs; Mauna Loa's weekly CO2
# readings (python3-statsmodels' data sets); espeak-ng synthesises the keyword-spotting
# example's speech; NumPy, SciPy and Pillow write the examples' files (deploy/examples).
DATA="dataset-fashion-mnist python3-sklearn python3-statsmodels espeak-ng python3-numpy python3-scipy python3-pil"
# The tests that compare our kernels and model specs with PyTorch (nn_spec_torch), and
# `starling bench gemm` / `bench train` (compared side by side with these).
TESTS="python3-torch"
BENCH="libopenblas0"

[ "${1:-}" = "--list-libs" ] && { echo "$LIBS"; exit 0; }

want="$TOOLS $LIBS $OPERATOR $SERVER $DATA $TESTS"
arches=()
for arch in "$@"; do
    [ "$arch" = "--bench" ] && { want="$want $BENCH"; continue; }
    case "$arch" in
    arm64) want="$want gcc-aarch64-linux-gnu qemu-user" ;;
    armhf) want="$want gcc-arm-linux-gnueabihf qemu-user" ;;
    *) echo "install-deps: unknown architecture '$arch' (use arm64 or armhf)" >&2; exit 2 ;;
    esac
    arches+=("$arch")
done

missing=()
for pkg in $want; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "installed" ] || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all packages present"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages; run:" >&2
    add=""
    for arch in "${arches[@]}"; do add="${add}sudo dpkg --add-architecture $arch && "; done
    echo "  ${add}sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

for arch in "${arches[@]}"; do
    grep -qx "$arch" <<<"$(dpkg --print-foreign-architectures)" || dpkg --add-architecture "$arch"
done
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A mirror caught mid-sync can fail one index; the others still serve what we need.
apt-get update -qq || echo "install-deps: apt-get update reported errors; trying the install anyway" >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}"
