/* The public face of the codec's delta estimate and choice
 * (core/delta_estimate.h) for `reshard simulate`, which sees only public
 * headers. */
#include <stdlib.h>

#include "core/delta_estimate.h"
#include "core/diag.h"
#include "reshard_layout/delta.h"

struct rs_delta_estimator {
    rs__delta_est_t est;
};

rs_status_t rs_delta_estimator_create(uint32_t esize, double share,
                                      rs_diag_t *diag,
                                      rs_delta_estimator_h *est_p)
{
    if (esize != 1 && esize != 2 && esize != 4)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "delta estimate: "
                            "element size %u (want 1, 2 or 4)", esize);
    if (!(share >= 0 && share <= 1))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "delta estimate: "
                            "changed share %g (want 0 to 1)", share);
    struct rs_delta_estimator *e = malloc(sizeof(*e));
    if (e == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "delta estimate: out "
                            "of memory");
    rs__delta_est_init(&e->est, share, esize, 0);
    *est_p = e;
    return RS_OK;
}

void rs_delta_estimator_destroy(rs_delta_estimator_h est)
{
    free(est);
}

rs_status_t rs_delta_estimator_set_steps(rs_delta_estimator_h est,
                                         double step1, double escape,
                                         rs_diag_t *diag)
{
    if (!(step1 >= 0 && step1 <= 1) || !(escape >= 0 && escape <= 1))
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "delta estimate: step "
                            "shares %g and %g (want 0 to 1)", step1, escape);
    rs__delta_est_steps(&est->est, step1, escape);
    return RS_OK;
}

double rs_delta_estimate_range(rs_delta_estimator_h est, uint64_t n,
                               uint64_t a, uint64_t b)
{
    return rs__delta_est_range(&est->est, n, a, b);
}

uint32_t rs_delta_range_reads(void)
{
    return RS__DELTA_RANGE_READS;
}

int rs_delta_pays(uint64_t full_bytes, double delta_bytes, double nic_gbps,
                  double descriptor_ns)
{
    return rs__delta_read_pays(full_bytes, delta_bytes, RS__DELTA_RANGE_READS,
                               nic_gbps, descriptor_ns);
}
