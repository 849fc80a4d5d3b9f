# The version's one source is include/reshard/version.h: RS_VERSION_MAJOR,
# _MINOR and _PATCH. This reads them into RESHARD_VERSION for project();
# pyproject.toml reads the same three lines for the wheel, and the Python
# package reports the wheel's version (or, in a source tree, the header's).
file(READ ${CMAKE_CURRENT_LIST_DIR}/../include/reshard/version.h
     RESHARD_VERSION_HEADER)
set(RESHARD_VERSION_PARTS)
foreach(part MAJOR MINOR PATCH)
  if(NOT RESHARD_VERSION_HEADER MATCHES "#define RS_VERSION_${part} +([0-9]+)")
    message(FATAL_ERROR
            "include/reshard/version.h: no '#define RS_VERSION_${part} <number>'")
  endif()
  list(APPEND RESHARD_VERSION_PARTS ${CMAKE_MATCH_1})
endforeach()
list(JOIN RESHARD_VERSION_PARTS "." RESHARD_VERSION)
