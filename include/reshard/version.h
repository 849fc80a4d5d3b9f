/* The library's version: macros for the headers a program was compiled
 * against, functions for the library it runs with. The three numbers below
 * are the version's one source: CMake's project version, the Python
 * wheel's version and reshard.__version__ are read from them. */
#ifndef RESHARD_VERSION_H
#define RESHARD_VERSION_H

#include "reshard/status.h"

#define RS_VERSION_MAJOR 0
#define RS_VERSION_MINOR 1
#define RS_VERSION_PATCH 0
#define RS_VERSION_NUMBER \
    (RS_VERSION_MAJOR * 10000 + RS_VERSION_MINOR * 100 + RS_VERSION_PATCH)
#define RS__VERSION_STR(x) #x
#define RS__VERSION_XSTR(x) RS__VERSION_STR(x)
#define RS_VERSION_STRING                                                   \
    RS__VERSION_XSTR(RS_VERSION_MAJOR) "." RS__VERSION_XSTR(RS_VERSION_MINOR) \
    "." RS__VERSION_XSTR(RS_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version at run time, as RS_VERSION_NUMBER and as
 * "major.minor.patch" (a static string). O(1), thread-safe. */
RS_API unsigned rs_version_number(void);
RS_API const char *rs_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
