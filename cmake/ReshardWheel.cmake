# What `cmake --install` puts into the Python wheel (RESHARD_WHEEL, set by
# pyproject.toml; scikit-build-core installs into the wheel's tree):
# libreshard inside the package, as reshard/lib/libreshard.so, where
# python/reshard/_lib.py looks first, and the `reshard` command among the
# wheel's scripts (the environment's bin/). The command is linked with the
# static library, so it runs wherever pip puts it without finding a
# libreshard; its objects are the CLI's own (reshard_cli_obj).
install(FILES $<TARGET_FILE:reshard> DESTINATION reshard/lib
        RENAME libreshard.so)

if(TARGET reshard_cli_obj)
  add_executable(reshard_cli_wheel $<TARGET_OBJECTS:reshard_cli_obj>)
  target_link_libraries(reshard_cli_wheel PRIVATE reshard_layout reshard_static)
  set_target_properties(reshard_cli_wheel PROPERTIES OUTPUT_NAME reshard
                        RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/wheel)
  # SKBUILD_SCRIPTS_DIR: scikit-build-core's scripts folder of the wheel
  if(NOT DEFINED SKBUILD_SCRIPTS_DIR)
    set(SKBUILD_SCRIPTS_DIR ${CMAKE_INSTALL_BINDIR})
  endif()
  install(TARGETS reshard_cli_wheel RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR})
endif()
