/* The table a publisher writes for a version: its shards grouped by tensor,
 * with addresses, the exposer's blob (base64, in agent_meta_b64) and, when
 * asked, an rsd64 digest per shard computed from the bytes being served. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "refit/refit_impl.h"
#include "reshard/digest.h"

static json_t *dims(const int64_t *d, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer((json_int_t)d[i]));
    return a;
}

static json_t *shard_json(rs_publisher_h p, const rs_pub_shard_t *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "agent_name", json_string(p->session));
    json_object_set_new(o, "device_id", json_integer(0));
    json_object_set_new(o, "addr", json_integer((json_int_t)(uintptr_t)s->ptr));
    json_object_set_new(o, "shard_offset", dims(s->offset, s->ndim));
    json_object_set_new(o, "shape", dims(s->shape, s->ndim));
    if (p->params.digests) {
        char text[RS_DIGEST_STR_LEN + 1];
        rs_digest_format(rs_digest(s->ptr, (size_t)s->nbytes), text);
        json_object_set_new(o, "digest", json_string(text));
    }
    return o;
}

/* The tensor entry for s->tensor, created on first use (tensors keep the
 * order in which they were first registered). */
static json_t *tensor_entry(json_t *tensors, json_t *index,
                            const rs_pub_shard_t *s)
{
    json_t *t = json_object_get(index, s->tensor);
    if (t != NULL)
        return t;
    t = json_object();
    json_object_set_new(t, "name", json_string(s->tensor));
    json_object_set_new(t, "dtype", json_string(rs_dtype_name(s->dtype)));
    json_object_set_new(t, "elsize", json_integer((json_int_t)rs_dtype_size(s->dtype)));
    json_object_set_new(t, "full_shape", dims(s->full_shape, s->ndim));
    json_object_set_new(t, "shards", json_array());
    json_array_append_new(tensors, t);
    json_object_set(index, s->tensor, t);
    return t;
}

rs_status_t rs__publisher_table(rs_publisher_h p, int64_t version,
                                char **json_p, size_t *len_p, rs_diag_t *diag)
{
    const void *blob;
    size_t blob_len;
    char *b64 = NULL;
    rs_status_t st = rs_exposer_blob(p->exposer, &blob, &blob_len);
    if (st == RS_OK)
        st = rs_base64_encode(blob, blob_len, &b64);
    if (st != RS_OK)
        return rs__diag_set(diag, st, "publisher: cannot encode the "
                            "transport blob");
    json_t *root = json_object(), *tensors = json_array(), *index = json_object();
    json_object_set_new(root, "schema", json_string("mx.reshard.shard_table.v1"));
    json_object_set_new(root, "agent_name", json_string(p->session));
    json_object_set_new(root, "agent_meta_b64", json_string(b64));
    free(b64);
    for (size_t i = 0; i < p->shards_len; i++) {
        const rs_pub_shard_t *s = &p->shards[i];
        if (s->nbytes == 0)
            continue;
        json_t *t = tensor_entry(tensors, index, s);
        json_array_append_new(json_object_get(t, "shards"), shard_json(p, s));
    }
    json_object_set_new(root, "tensors", tensors);
    json_object_set_new(root, "publisher_step", json_integer((json_int_t)version));
    json_decref(index);
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (text == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    *json_p = text;
    *len_p = strlen(text);
    return RS_OK;
}
