/* reshard: move a model version from trainer ranks to inference ranks with a
 * different parallel layout, one exact byte run at a time. Umbrella header. */
#ifndef RESHARD_H
#define RESHARD_H

#include "reshard/version.h"
#include "reshard/status.h"
#include "reshard/cancel.h"
#include "reshard/units.h"
#include "reshard/limits.h"
#include "reshard/dtype.h"
#include "reshard/memory.h"
#include "reshard/view.h"
#include "reshard/quant.h"
#include "reshard/capture.h"
#include "reshard/cuts.h"
#include "reshard/sources.h"
#include "reshard/plan.h"
#include "reshard/digest.h"
#include "reshard/transport.h"
#include "reshard/exec.h"
#include "reshard/expose.h"
#include "reshard/dir.h"
#include "reshard/refit.h"

#endif
