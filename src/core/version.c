/* Run-time version of the library. */
#include "reshard/version.h"

unsigned rs_version_number(void) { return RS_VERSION_NUMBER; }

const char *rs_version_string(void) { return RS_VERSION_STRING; }
