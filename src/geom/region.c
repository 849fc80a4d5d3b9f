/* Region runs: dims sorted by stride, the innermost ones folded into one run
 * while each continues the last, the rest walked as an odometer. */
#include "geom/region.h"
#include "reshard/view.h"

void rs__region_runs(int ndim, const int64_t *shape, const int64_t *stride,
                    int64_t offset, rs__region_cb cb, void *ctx)
{
    int order[RS_MAX_DIMS], n = 0;
    int64_t run = 1, idx[RS_MAX_DIMS] = {0};

    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0)
            return;
        if (shape[i] > 1)
            order[n++] = i;
    }
    for (int a = 1; a < n; a++) { /* ascending stride */
        int t = order[a], k = a;
        for (; k > 0 && stride[order[k - 1]] > stride[t]; k--)
            order[k] = order[k - 1];
        order[k] = t;
    }
    int folded = 0;
    while (folded < n && stride[order[folded]] == run)
        run *= shape[order[folded++]];
    for (;;) {
        cb(ctx, offset, run);
        int k = folded;
        for (; k < n; k++) {
            int d = order[k];
            if (++idx[k] < shape[d]) {
                offset += stride[d];
                break;
            }
            offset -= (shape[d] - 1) * stride[d];
            idx[k] = 0;
        }
        if (k == n)
            return;
    }
}
