/* Writer of reshard.cuts.v1 JSON, the inverse of cuts_json.c: tensors in
 * name order, one per line, each dim's cuts in increasing order, so equal
 * sets are equal text; the quantized-copy pairs follow in (src, spec)
 * order. Streams to the FILE* without building a tree. */
#include <stdio.h>

#include "core/diag.h"
#include "core/json_write.h"
#include "model/cuts_impl.h"

static void put_tensor(FILE *out, const rs__cut_tensor_t *t, int first)
{
    fputs(first ? "\n  {\"name\": " : ",\n  {\"name\": ", out);
    rs__json_put_string(out, t->name);
    fputs(", \"shape\": ", out);
    rs__json_put_ints(out, t->shape, (size_t)t->ndim);
    fputs(", \"cuts\": [", out);
    for (int d = 0; d < t->ndim; d++) {
        if (d > 0)
            fputs(", ", out);
        rs__json_put_ints(out, t->dims[d].at, t->dims[d].at_len);
    }
    fputs("]}", out);
}

/* The "quantize" list, only when the set holds pairs (so a set without
 * them writes the text it always wrote). */
static void put_quants(FILE *out, rs_cuts_h cuts)
{
    if (cuts->quants_len == 0)
        return;
    fputs(",\n \"quantize\": [", out);
    for (size_t i = 0; i < cuts->quants_len; i++) {
        fputs(i ? ",\n  {\"src\": " : "\n  {\"src\": ", out);
        rs__json_put_string(out, cuts->quants[i].src);
        fputs(", \"spec\": ", out);
        rs__json_put_string(out, cuts->quants[i].spec);
        fputc('}', out);
    }
    fputs("\n]", out);
}

rs_status_t rs_cuts_write_json(rs_cuts_h cuts, FILE *out, rs_diag_t *diag)
{
    if (cuts == NULL || out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "cuts: NULL set or "
                            "output");
    fputs("{\"schema\": \"reshard.cuts.v1\"", out);
    if (cuts->model != NULL) {
        fputs(", \"model\": ", out);
        rs__json_put_string(out, cuts->model);
    }
    fputs(", \"tensors\": [", out);
    for (size_t i = 0; i < cuts->order_len; i++)
        put_tensor(out, &cuts->tensors[cuts->order[i]], i == 0);
    fputs(cuts->order_len ? "\n]" : "]", out);
    put_quants(out, cuts);
    fputs("}\n", out);
    if (ferror(out) || fflush(out) != 0)
        return rs__diag_set(diag, RS_ERR_IO, "cuts: write failed");
    return RS_OK;
}
