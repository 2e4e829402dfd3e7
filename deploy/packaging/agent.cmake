# deploy/packaging/agent.cmake - the Debian package of starling-agent (CPack).
# Included from device/CMakeLists.txt, after the starling-agent target.
#
#   cmake --build build/<preset> --target package-agent   (or deploy/package-agent.sh <arch>)
#   -> build/<preset>/starling-agent_<version>_<arch>.deb
#
# amd64 from the default/release presets, arm64 and armhf from the aarch64
# and armhf cross presets. The package holds:
#   /usr/bin/starling-agent                       stripped (the toolchain's strip)
#   /lib/systemd/system/starling-agent.service    hardened, DynamicUser, StateDirectory
#   /etc/starling/agent.conf                      conffile
#   /usr/share/man/man1/starling-agent.1.gz       made from the binary's --help at
#                                                 packaging time (agent-manpage.sh; a
#                                                 cross build runs it under qemu-user)
#   /usr/share/doc/starling-agent/copyright
# Depends come from agent-depends.txt (why not dpkg-shlibdeps: see there).
# The install rules are component `agent`, EXCLUDE_FROM_ALL: a plain
# `cmake --install` leaves /etc and /lib alone; cpack installs the component
# into its staging directory only. tests/deploy/test_agent_packages.sh
# inspects the packages and runs them.
set(SL_AGENT_PKG_SRC "${PROJECT_SOURCE_DIR}/deploy/packaging")

# The Debian architecture: the cross toolchain files set SL_DEB_ARCH.
if(SL_DEB_ARCH)
  set(sl_deb_arch ${SL_DEB_ARCH})
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(sl_deb_arch amd64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(sl_deb_arch arm64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^arm")
  set(sl_deb_arch armhf)
else()
  set(sl_deb_arch ${CMAKE_SYSTEM_PROCESSOR})
endif()

# Depends: one package a line, comments after '#'.
file(STRINGS "${SL_AGENT_PKG_SRC}/agent-depends.txt" sl_dep_lines)
set(sl_depends "")
foreach(line IN LISTS sl_dep_lines)
  string(REGEX REPLACE "#.*" "" line "${line}")
  string(STRIP "${line}" line)
  if(line)
    list(APPEND sl_depends "${line}")
  endif()
endforeach()
list(JOIN sl_depends ", " sl_depends)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${SL_AGENT_PKG_SRC}/agent-depends.txt")

install(TARGETS starling-agent RUNTIME DESTINATION bin COMPONENT agent EXCLUDE_FROM_ALL)
install(FILES "${SL_AGENT_PKG_SRC}/starling-agent.service" DESTINATION /lib/systemd/system
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT agent EXCLUDE_FROM_ALL)
install(FILES "${SL_AGENT_PKG_SRC}/agent.conf" DESTINATION /etc/starling
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT agent EXCLUDE_FROM_ALL)
install(FILES "${SL_AGENT_PKG_SRC}/copyright" DESTINATION share/doc/starling-agent
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT agent EXCLUDE_FROM_ALL)

# The man page, from the binary being packaged (under the cross emulator).
set(sl_man "${CMAKE_BINARY_DIR}/device/starling-agent.1")
set(sl_man_cmd bash "${SL_AGENT_PKG_SRC}/agent-manpage.sh" "${sl_man}" "${PROJECT_VERSION}"
               "$<TARGET_FILE:starling-agent>" ${CMAKE_CROSSCOMPILING_EMULATOR})
list(JOIN sl_man_cmd "\" \"" sl_man_cmd)
install(CODE "
  execute_process(COMMAND \"${sl_man_cmd}\" RESULT_VARIABLE sl_man_rc)
  if(NOT sl_man_rc EQUAL 0)
    message(FATAL_ERROR \"starling-agent.1: agent-manpage.sh failed (a cross build runs the agent under qemu-user: deploy/install-deps.sh ${sl_deb_arch})\")
  endif()" COMPONENT agent EXCLUDE_FROM_ALL)
install(FILES "${sl_man}.gz" DESTINATION share/man/man1
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT agent EXCLUDE_FROM_ALL)

# cpack first builds the `preinstall` target, which by default builds
# everything (in a cross build: every test program too). Packaging needs
# only starling-agent, which `package-agent` builds before it runs cpack.
# (The project has no other install rules. The built-in `package` target
# then packs what is built: build first.)
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON CACHE BOOL "preinstall does not build all (packaging)")

set(SL_PACKAGE_MAINTAINER "Starling developers <packages@starling.dev>" CACHE STRING
    "Maintainer field of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME starling)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${SL_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL agent)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${sl_deb_arch})
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_AGENT_PACKAGE_NAME starling-agent)
set(CPACK_DEBIAN_AGENT_FILE_NAME "starling-agent_${PROJECT_VERSION}_${sl_deb_arch}.deb")
set(CPACK_DEBIAN_AGENT_PACKAGE_SECTION science)
set(CPACK_DEBIAN_AGENT_PACKAGE_DEPENDS "${sl_depends}")
set(CPACK_DEBIAN_AGENT_PACKAGE_RECOMMENDS "ca-certificates, dataset-fashion-mnist")
set(CPACK_DEBIAN_AGENT_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_AGENT_PACKAGE_CONTROL_EXTRA
    "${SL_AGENT_PKG_SRC}/conffiles;${SL_AGENT_PKG_SRC}/postinst;${SL_AGENT_PKG_SRC}/prerm;${SL_AGENT_PKG_SRC}/postrm")
set(CPACK_COMPONENT_AGENT_DESCRIPTION "Starling federated-learning agent for edge devices
starling-agent is the device program of Starling, federated learning in C for
fleets of edge devices on unreliable networks. It enrols the device with a
Starling coordinator, trains the current model on local data with its own SIMD
kernels, and uploads a sparsified, entropy-coded update over HTTPS, resumably,
keeping its state so that it resumes after any interruption.
.
This package holds the program, a hardened systemd unit (not enabled at
installation) and its configuration file /etc/starling/agent.conf.")
set(CPACK_OUTPUT_FILE_PREFIX "")
include(CPack)

add_custom_target(package-agent
  COMMAND ${CMAKE_CPACK_COMMAND} --config "${CMAKE_BINARY_DIR}/CPackConfig.cmake"
  WORKING_DIRECTORY "${CMAKE_BINARY_DIR}"
  COMMENT "Packing ${CPACK_DEBIAN_AGENT_FILE_NAME}"
  VERBATIM)
add_dependencies(package-agent starling-agent)
