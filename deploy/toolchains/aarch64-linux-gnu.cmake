# Cross-compile for 64-bit Arm (aarch64) with Debian's gcc-aarch64-linux-gnu.
# Libraries come from a sysroot of Debian's :arm64 packages that
# deploy/make-sysroot.sh builds (on first configure, if it is missing).
# Tests run under qemu-user through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(SL_TRIPLE aarch64-linux-gnu)
set(SL_DEB_ARCH arm64)
set(SL_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/cross-common.cmake)
