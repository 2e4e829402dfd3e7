# Cross-compile for 32-bit Arm (armv7-a, hard float, NEON) with Debian's
# gcc-arm-linux-gnueabihf. Libraries come from a sysroot of Debian's :armhf
# packages that deploy/make-sysroot.sh builds (on first configure, if it is
# missing). Tests run under qemu-user through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(SL_TRIPLE arm-linux-gnueabihf)
set(SL_DEB_ARCH armhf)
set(SL_QEMU qemu-arm)
# Debian's armhf baseline is ARMv7 + VFPv3-D16; the boards we target have NEON.
set(CMAKE_C_FLAGS_INIT "-march=armv7-a -mfpu=neon -mfloat-abi=hard")
include(${CMAKE_CURRENT_LIST_DIR}/cross-common.cmake)
