/* The library's version: macros for the headers a program was compiled
 * against, functions for the library it runs with. */
#ifndef RESHARD_VERSION_H
#define RESHARD_VERSION_H

#include "reshard/status.h"

#define RS_VERSION_MAJOR 0
#define RS_VERSION_MINOR 1
#define RS_VERSION_PATCH 0
#define RS_VERSION_NUMBER \
    (RS_VERSION_MAJOR * 10000 + RS_VERSION_MINOR * 100 + RS_VERSION_PATCH)
#define RS_VERSION_STRING "0.1.0"

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
