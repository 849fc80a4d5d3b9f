# What `cmake --install` puts under the prefix: the shared and the static
# library, the public headers (the layout simulator's model.h and layout.h
# stay behind: they serve the CLI, benches and tests, not users), the CLI,
# reshard.pc for pkg-config and the CMake package reshardConfig.cmake with
# its version file and the imported targets reshard::reshard (shared) and
# reshard::reshard_static.
include(CMakePackageConfigHelpers)

set(RESHARD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/reshard)

file(GLOB RESHARD_PUBLIC_HEADERS ${CMAKE_SOURCE_DIR}/include/reshard/*.h)
list(FILTER RESHARD_PUBLIC_HEADERS EXCLUDE REGEX "/(model|layout)\\.h$")
install(FILES ${RESHARD_PUBLIC_HEADERS}
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/reshard)

install(TARGETS reshard reshard_static EXPORT reshardTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET reshard_cli)
  # the installed CLI finds the installed library wherever the prefix is
  file(RELATIVE_PATH RESHARD_BIN_TO_LIB /${CMAKE_INSTALL_BINDIR}
       /${CMAKE_INSTALL_LIBDIR})
  set_target_properties(reshard_cli PROPERTIES
                        INSTALL_RPATH "$ORIGIN/${RESHARD_BIN_TO_LIB}")
  install(TARGETS reshard_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT reshardTargets NAMESPACE reshard::
        DESTINATION ${RESHARD_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/reshardConfig.cmake.in
        ${CMAKE_BINARY_DIR}/reshardConfig.cmake
        INSTALL_DESTINATION ${RESHARD_CMAKE_DIR})
# 0.x: a minor release may change the API
write_basic_package_version_file(${CMAKE_BINARY_DIR}/reshardConfigVersion.cmake
        VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/reshardConfig.cmake
              ${CMAKE_BINARY_DIR}/reshardConfigVersion.cmake
        DESTINATION ${RESHARD_CMAKE_DIR})

# reshard.pc finds its prefix from its own place (${pcfiledir}), so the
# tree may be installed under any --prefix and moved.
file(RELATIVE_PATH RESHARD_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig
     /prefix)
string(REGEX REPLACE "/$" "" RESHARD_PC_TO_PREFIX "${RESHARD_PC_TO_PREFIX}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/reshard.pc.in
               ${CMAKE_BINARY_DIR}/reshard.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/reshard.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
