/* Checks of a whole capture that every consumer of it applies the same way
 * (the planner, and a receiver before it binds anything), so that each
 * refuses with the same message. */
#ifndef RS_PLAN_CAPTURE_CHECK_H
#define RS_PLAN_CAPTURE_CHECK_H

#include "reshard/capture.h"
#include "reshard/status.h"

/* RS_ERR_INPUT when the capture counts unattributed writes: loader writes
 * it could not tie to a source are bytes no plan fills, so any plan of it
 * would install a wrong weight. RS_OK otherwise. */
rs_status_t rs__capture_check_attributed(rs_capture_h capture,
                                         rs_diag_t *diag);

#endif
