/* reshard: move a model version from trainer ranks to inference ranks with a
 * different parallel layout, one exact byte run at a time. Umbrella header. */
#ifndef RESHARD_H
#define RESHARD_H

#define RS_VERSION_MAJOR 0
#define RS_VERSION_MINOR 1
#define RS_VERSION_PATCH 0
#define RS_VERSION_NUMBER \
    (RS_VERSION_MAJOR * 10000 + RS_VERSION_MINOR * 100 + RS_VERSION_PATCH)
#define RS_VERSION_STRING "0.1.0"

#include "reshard/status.h"
#include "reshard/units.h"
#include "reshard/dtype.h"
#include "reshard/capture.h"
#include "reshard/sources.h"
#include "reshard/plan.h"
#include "reshard/convert.h"
#include "reshard/digest.h"
#include "reshard/transport.h"
#include "reshard/exec.h"
#include "reshard/base64.h"
#include "reshard/expose.h"
#include "reshard/dir.h"
#include "reshard/refit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version at run time, as RS_VERSION_NUMBER. */
RS_API unsigned rs_version_number(void);
RS_API const char *rs_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
