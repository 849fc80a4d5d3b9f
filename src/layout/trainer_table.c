/* Writes one trainer rank's mx.reshard.shard_table.v1 blob. Streams straight
 * to the file (one tensor per line) instead of building a JSON tree: a rank
 * of a large MoE model publishes tens of thousands of tensors. */
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "layout/trainer_impl.h"

/* The spelling PyTorch-side readers of these tables expect. */
static const char *torch_dtype(rs_dtype_t d)
{
    switch (d) {
    case RS_DTYPE_F32: return "torch.float32";
    case RS_DTYPE_BF16: return "torch.bfloat16";
    case RS_DTYPE_F16: return "torch.float16";
    case RS_DTYPE_F8E4M3: return "torch.float8_e4m3fn";
    case RS_DTYPE_F8E5M2: return "torch.float8_e5m2";
    case RS_DTYPE_F64: return "torch.float64";
    case RS_DTYPE_I8: return "torch.int8";
    case RS_DTYPE_U8: return "torch.uint8";
    case RS_DTYPE_I16: return "torch.int16";
    case RS_DTYPE_I32: return "torch.int32";
    case RS_DTYPE_I64: return "torch.int64";
    case RS_DTYPE_BOOL: return "torch.bool";
    default: return rs_dtype_name(d);
    }
}

static void put_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static void put_dims(FILE *out, const int64_t *dims, int n)
{
    fputc('[', out);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%lld", i ? ", " : "", (long long)dims[i]);
    fputc(']', out);
}

/* Shards of one tensor arrive back to back; the open entry is closed when
 * the next tensor starts or the walk ends. */
typedef struct table_ctx {
    FILE *out;
    const char *open_tensor; /* borrowed from the manifest */
    size_t tensors;
} table_ctx_t;

static void open_tensor(table_ctx_t *c, const rs_shard_desc_t *d)
{
    if (c->open_tensor != NULL)
        fputs("]}", c->out);
    fputs(c->tensors ? ",\n  {\"name\": " : "\n  {\"name\": ", c->out);
    put_string(c->out, d->tensor);
    fprintf(c->out, ", \"dtype\": \"%s\", \"elsize\": %zu, \"full_shape\": ",
            torch_dtype(d->dtype), d->elsize);
    put_dims(c->out, d->full_shape, d->ndim);
    fputs(", \"shards\": [", c->out);
    c->open_tensor = d->tensor;
    c->tensors++;
}

static rs_status_t put_shard(void *ctx, const rs_shard_desc_t *d)
{
    table_ctx_t *c = ctx;
    int same = c->open_tensor != NULL && strcmp(c->open_tensor, d->tensor) == 0;

    if (!same)
        open_tensor(c, d);
    else
        fputs(", ", c->out);
    fputs("{\"agent_name\": ", c->out);
    put_string(c->out, d->session);
    fprintf(c->out, ", \"device_id\": %lld, \"addr\": %llu, \"shard_offset\": ",
            (long long)d->device_id, (unsigned long long)d->addr);
    put_dims(c->out, d->offset, d->ndim);
    fputs(", \"shape\": ", c->out);
    put_dims(c->out, d->shape, d->ndim);
    fputc('}', c->out);
    return ferror(c->out) ? RS_ERR_IO : RS_OK;
}

rs_status_t rs_layout_write_table(rs_model_h model, const rs_layout_t *layout,
                                  int64_t rank, FILE *out, rs_diag_t *diag)
{
    rs_trainer_plan_t plan;
    table_ctx_t c = {out, NULL, 0};
    char session[32];
    rs_status_t st;

    if (out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL output");
    if ((st = rs__trainer_plan_init(&plan, model, layout, diag)) != RS_OK)
        return st;
    rs_layout_trainer_session(rank, session, sizeof(session));
    fputs("{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": ", out);
    put_string(out, session);
    fputs(", \"publisher_step\": 0, \"tensors\": [", out);
    st = rs__trainer_plan_walk(&plan, rank, put_shard, &c, diag);
    rs__trainer_plan_free(&plan);
    if (st != RS_OK && st != RS_ERR_IO)
        return st; /* a bad layout or manifest, already described */
    fputs(c.open_tensor != NULL ? "]}\n]}\n" : "]}\n", out);
    if (st == RS_ERR_IO || ferror(out) || fflush(out) != 0)
        return rs__diag_set(diag, RS_ERR_IO, "shard table of trainer rank "
                            "%lld: write failed", (long long)rank);
    return RS_OK;
}
