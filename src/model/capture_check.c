/* The capture checks every consumer shares: the planner and a receiver call
 * the same function, so the refusal reads the same from every tool. */
#include "core/diag.h"
#include "model/capture_check.h"

rs_status_t rs__capture_check_attributed(rs_capture_h capture,
                                         rs_diag_t *diag)
{
    int64_t n = rs_capture_unattributed(capture);
    if (n <= 0)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_INPUT, "the capture has %lld "
                        "unattributed write(s) (loader writes not tied to a "
                        "source); refusing it", (long long)n);
}
