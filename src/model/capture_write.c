/* reshard.capture.v1 writer: the inverse of capture_json.c. Streams straight
 * to the FILE* (captures of large models hold many thousands of copies), one
 * parameter or copy per line, so that a written capture loads back into the
 * same capture and writes out byte for byte the same text. */
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "core/json_write.h"
#include "model/capture_impl.h"
#include "model/capture_quant_json.h"
#include "reshard/capture.h"

/* ", v": the next array element */
static void put_next(FILE *out, int64_t v)
{
    fputs(", ", out);
    rs__json_put_int(out, v);
}

/* ", v" or ", null" */
static void put_opt(FILE *out, int given, int64_t v)
{
    if (given)
        put_next(out, v);
    else
        fputs(", null", out);
}

/* ", a0, a1, ..." for the first n fixed arguments. */
static void put_args(FILE *out, const rs_op_t *op, int n)
{
    for (int i = 0; i < n; i++)
        put_next(out, op->arg[i]);
}

static void put_key(FILE *out, const rs_key_t *k)
{
    switch (k->kind) {
    case RS_KEY_INDEX:
        rs__json_put_int(out, k->index);
        break;
    case RS_KEY_SLICE:
        putc('[', out);
        if (k->has_start)
            rs__json_put_int(out, k->start);
        else
            fputs("null", out);
        put_opt(out, k->has_stop, k->stop);
        put_opt(out, k->has_step, k->step);
        putc(']', out);
        break;
    default: /* RS_KEY_FULL */
        fputs("null", out);
        break;
    }
}

static void put_getitem(FILE *out, const rs_op_t *op)
{
    fputs(", [", out);
    for (size_t i = 0; i < op->nkeys; i++) {
        if (i > 0)
            fputs(", ", out);
        put_key(out, &op->keys[i]);
    }
    putc(']', out);
}

/* Arguments of the ops whose presence bits decide what is written. */
static void put_optional_args(FILE *out, const rs_op_t *op)
{
    switch (op->kind) {
    case RS_OP_SLICE: /* step only when given, as the loader records it */
        put_args(out, op, 1);
        put_opt(out, (op->has >> 1) & 1u, op->arg[1]);
        put_opt(out, (op->has >> 2) & 1u, op->arg[2]);
        if (op->has & (1u << 3))
            put_next(out, op->arg[3]);
        break;
    case RS_OP_FLATTEN: /* an end without a start needs the default start */
        if (op->has & 2u) {
            put_next(out, (op->has & 1u) ? op->arg[0] : 0);
            put_next(out, op->arg[1]);
        } else if (op->has & 1u) {
            put_args(out, op, 1);
        }
        break;
    default: /* RS_OP_SQUEEZE */
        if (op->has & 1u)
            put_args(out, op, 1);
        break;
    }
}

/* The arguments of one op after its name (its kind is known). */
static void put_op_args(FILE *out, const rs_op_t *op)
{
    switch (op->kind) {
    case RS_OP_NARROW:
    case RS_OP_CHUNK:
        put_args(out, op, 3);
        break;
    case RS_OP_SELECT:
    case RS_OP_TRANSPOSE:
    case RS_OP_UNBIND:
        put_args(out, op, 2);
        break;
    case RS_OP_UNSQUEEZE:
        put_args(out, op, 1);
        break;
    case RS_OP_T:
    case RS_OP_CONTIGUOUS:
        break;
    case RS_OP_GETITEM:
        put_getitem(out, op);
        break;
    case RS_OP_PERMUTE:
    case RS_OP_VIEW:
    case RS_OP_RESHAPE:
        fputs(", ", out);
        rs__json_put_ints(out, op->list, op->nlist);
        break;
    case RS_OP_UNFLATTEN:
        put_args(out, op, 1);
        fputs(", ", out);
        rs__json_put_ints(out, op->list, op->nlist);
        break;
    case RS_OP_SPLIT:
        fputs(", ", out);
        if (op->nlist > 0)
            rs__json_put_ints(out, op->list, op->nlist);
        else
            rs__json_put_int(out, op->arg[0]);
        put_next(out, op->arg[1]);
        put_next(out, op->arg[2]);
        break;
    case RS_OP_SLICE:
    case RS_OP_FLATTEN:
    case RS_OP_SQUEEZE:
        put_optional_args(out, op);
        break;
    }
}

static rs_status_t put_copy(FILE *out, const rs__capture_copy_t *c, size_t index,
                            rs_diag_t *diag)
{
    fputs("  {\"src\": ", out);
    rs__json_put_string(out, c->src);
    fputs(", \"ops\": [", out);
    for (size_t i = 0; i < c->nops; i++) {
        fputs(i > 0 ? ", [" : "[", out);
        if (strcmp(rs_op_name(c->ops[i].kind), "?") == 0)
            return rs__diag_set(diag, RS_ERR_INPUT, "copies[%zu].ops[%zu] "
                                "(copy of '%s'): unknown op kind %d", index, i,
                                c->src, (int)c->ops[i].kind);
        rs__json_put_string(out, rs_op_name(c->ops[i].kind));
        put_op_args(out, &c->ops[i]);
        putc(']', out);
    }
    fputs("], \"param\": ", out);
    rs__json_put_string(out, c->param);
    fputs(", \"dest_offset\": ", out);
    rs__json_put_int(out, c->dest_offset);
    fputs(", \"dest_shape\": ", out);
    rs__json_put_ints(out, c->dest_shape, (size_t)c->ndim);
    fputs(", \"dest_stride\": ", out);
    rs__json_put_ints(out, c->dest_stride, (size_t)c->ndim);
    fputs(", \"dest_dtype\": ", out);
    rs__json_put_string(out, rs_dtype_name(c->dest_dtype));
    if (c->quant != NULL)
        rs__capture_put_quant(out, c->quant);
    putc('}', out);
    return RS_OK;
}

/* One entry of "params" or "sources": name: {"shape": [..], "dtype": ..}. */
static void put_shaped(FILE *out, size_t i, const char *name, int ndim,
                       const int64_t *shape, rs_dtype_t dtype)
{
    fputs(i > 0 ? ",\n  " : "\n  ", out);
    rs__json_put_string(out, name);
    fputs(": {\"shape\": ", out);
    rs__json_put_ints(out, shape, (size_t)ndim);
    fputs(", \"dtype\": ", out);
    rs__json_put_string(out, rs_dtype_name(dtype));
    putc('}', out);
}

static void put_params(FILE *out, rs_capture_h cap)
{
    fputs(" \"params\": {", out);
    for (size_t i = 0; i < cap->params_len; i++) {
        const rs__capture_param_t *p = &cap->params[i];
        put_shaped(out, i, p->name, p->ndim, p->shape, p->dtype);
    }
    fputs("},\n", out);
}

/* Always written, so that a loaded capture writes back byte for byte the
 * same text whether or not the file it came from had the key. */
static void put_sources(FILE *out, rs_capture_h cap)
{
    fputs(" \"sources\": {", out);
    for (size_t i = 0; i < cap->sources_len; i++) {
        const rs__capture_source_t *s = &cap->sources[i];
        put_shaped(out, i, s->name, s->ndim, s->shape, s->dtype);
    }
    fputs("},\n", out);
}

static void put_unsupported(FILE *out, rs_capture_h cap)
{
    fputs(" \"unsupported\": {", out);
    for (size_t i = 0; i < cap->unsupported_len; i++) {
        fputs(i > 0 ? ",\n  " : "\n  ", out);
        rs__json_put_string(out, cap->unsupported[i].src);
        fputs(": ", out);
        rs__json_put_string(out, cap->unsupported[i].reason);
    }
    fputs("},\n", out);
}

rs_status_t rs_capture_write_json(rs_capture_h capture, FILE *out,
                                  rs_diag_t *diag)
{
    rs_status_t st = RS_OK;

    if (capture == NULL || out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    fputs("{\"schema\": \"reshard.capture.v1\",\n", out);
    put_params(out, capture);
    put_sources(out, capture);
    fputs(" \"copies\": [", out);
    for (size_t i = 0; i < capture->copies_len && st == RS_OK; i++) {
        fputs(i > 0 ? ",\n" : "\n", out);
        st = put_copy(out, &capture->copies[i], i, diag);
    }
    if (st != RS_OK)
        return st;
    fputs("],\n", out);
    put_unsupported(out, capture);
    fputs(" \"unattributed\": ", out);
    rs__json_put_int(out, capture->unattributed);
    fputs("}\n", out);
    if (fflush(out) != 0 || ferror(out))
        return rs__diag_set(diag, RS_ERR_IO, "writing the capture failed");
    return RS_OK;
}

rs_status_t rs__capture_put_copy(FILE *out, rs_capture_h capture, size_t index,
                                 rs_diag_t *diag)
{
    return put_copy(out, &capture->copies[index], index, diag);
}
