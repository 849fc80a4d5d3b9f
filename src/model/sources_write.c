/* mx.reshard.shard_table.v1 writer: the inverse of sources_json.c, used by
 * the publisher and the layout simulator. Streams straight to the FILE*
 * (one tensor per line) instead of building a JSON tree: a rank of a large
 * MoE model publishes tens of thousands of tensors. Dtypes are written as
 * PyTorch spells them ("torch.bfloat16"), which ModelExpress readers expect
 * and the loader accepts beside the short names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "core/json_write.h"
#include "model/table_writer.h"
#include "reshard/sources.h"

struct rs_table_writer {
    FILE *out;
    char *open_tensor; /* name of the tensor entry still open, or NULL */
    size_t tensors;
};

static void put_opt(FILE *out, const char *key, const char *value)
{
    if (value == NULL)
        return;
    fprintf(out, ", \"%s\": ", key);
    rs__json_put_string(out, value);
}

rs_status_t rs_table_writer_open(FILE *out, const rs_table_info_t *table,
                                 rs_diag_t *diag, rs_table_writer_h *writer_p)
{
    if (out == NULL || table == NULL || table->agent_name == NULL ||
        writer_p == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "shard table writer: "
                            "NULL output, table or agent_name");
    rs_table_writer_h w = calloc(1, sizeof(*w));
    if (w == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    w->out = out;
    fputs("{\"schema\": \"mx.reshard.shard_table.v1\", \"agent_name\": ", out);
    rs__json_put_string(out, table->agent_name);
    put_opt(out, "metadata_endpoint", table->metadata_endpoint);
    put_opt(out, "agent_meta_b64", table->agent_meta_b64);
    if (table->publisher_step >= 0)
        fprintf(out, ", \"publisher_step\": %lld",
                (long long)table->publisher_step);
    fputs(", \"tensors\": [", out);
    *writer_p = w;
    return RS_OK;
}

/* Closes the open tensor entry (if any) and opens d's. */
static int open_tensor(rs_table_writer_h w, const rs_shard_desc_t *d)
{
    char *name = strdup(d->tensor);
    if (name == NULL)
        return 0;
    if (w->open_tensor != NULL)
        fputs("]}", w->out);
    free(w->open_tensor);
    w->open_tensor = name;
    fputs(w->tensors++ ? ",\n  {\"name\": " : "\n  {\"name\": ", w->out);
    rs__json_put_string(w->out, d->tensor);
    fputs(", \"dtype\": ", w->out);
    rs__json_put_string(w->out, rs_dtype_torch_name(d->dtype));
    fprintf(w->out, ", \"elsize\": %zu, \"full_shape\": ", d->elsize);
    rs__json_put_ints(w->out, d->full_shape, (size_t)d->ndim);
    fputs(", \"shards\": [", w->out);
    return 1;
}

rs_status_t rs_table_writer_add(rs_table_writer_h w,
                                const rs_shard_desc_t *d, rs_diag_t *diag)
{
    return rs__table_writer_add_extra(w, d, NULL, 0, diag);
}

rs_status_t rs__table_writer_add_extra(rs_table_writer_h w,
                                       const rs_shard_desc_t *d,
                                       const char *extra, size_t extra_len,
                                       rs_diag_t *diag)
{
    if (w == NULL || d == NULL || d->tensor == NULL || d->session == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "shard table writer: "
                            "NULL writer, shard, tensor or session");
    if (w->open_tensor != NULL && strcmp(w->open_tensor, d->tensor) == 0)
        fputs(", ", w->out);
    else if (!open_tensor(w, d))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    fputs("{\"agent_name\": ", w->out);
    rs__json_put_string(w->out, d->session);
    fprintf(w->out, ", \"device_id\": %lld, \"addr\": %llu, \"shard_offset\": ",
            (long long)d->device_id, (unsigned long long)d->addr);
    rs__json_put_ints(w->out, d->offset, (size_t)d->ndim);
    fputs(", \"shape\": ", w->out);
    rs__json_put_ints(w->out, d->shape, (size_t)d->ndim);
    if (d->digest != NULL && d->digest[0] != '\0')
        put_opt(w->out, "digest", d->digest);
    if (extra_len > 0)
        fwrite(extra, 1, extra_len, w->out);
    fputc('}', w->out);
    if (ferror(w->out))
        return rs__diag_set(diag, RS_ERR_IO, "shard table of '%s': write "
                            "failed", d->session);
    return RS_OK;
}

rs_status_t rs_table_writer_close(rs_table_writer_h w, rs_diag_t *diag)
{
    rs_status_t st = RS_OK;

    if (w == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL table writer");
    fputs(w->open_tensor != NULL ? "]}\n]}\n" : "]}\n", w->out);
    if (ferror(w->out) || fflush(w->out) != 0)
        st = rs__diag_set(diag, RS_ERR_IO, "shard table: write failed");
    free(w->open_tensor);
    free(w);
    return st;
}

void rs_table_writer_discard(rs_table_writer_h w)
{
    if (w == NULL)
        return;
    free(w->open_tensor);
    free(w);
}
