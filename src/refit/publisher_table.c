/* The table a publisher writes for a version: its shards grouped by tensor
 * (tensors in the order they were first registered), with addresses, the
 * exposer's blob (base64, in agent_meta_b64) and, when asked, an rsd64
 * digest per shard computed from the bytes being served (the caller's
 * memory, or the copy-in arena: where each shard's `served` points). In
 * cut-aligned staging every sub-box of a shard is an entry of its own. The
 * quantized copies (publisher_arena_quant.c) follow, as entries of
 * "<src>#<spec>" and "<src>#<spec>#scale". Written by the library's one
 * shard-table writer (rs_table_writer_*). Also the table's geometry key,
 * which the publisher brings to its directory slot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base64.h"
#include "core/diag.h"
#include "core/strmap.h"
#include "model/table_writer.h"
#include "refit/publisher_impl.h"
#include "reshard/digest.h"

typedef struct order_entry {
    uint32_t group; /* position of the shard's tensor's first registration */
    size_t index;
} order_entry_t;

static int by_group(const void *a, const void *b)
{
    const order_entry_t *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The shards to publish (non-empty ones), grouped by tensor. */
static rs_status_t shard_order(rs_publisher_h p, order_entry_t **order_p,
                               size_t *n_p)
{
    rs__strmap_t first;
    size_t n = 0;
    int ok = 1;
    order_entry_t *order = malloc((p->shards_len + 1) * sizeof(*order));

    rs__strmap_init(&first);
    for (size_t i = 0; ok && order != NULL && i < p->shards_len; i++) {
        const rs__publish_shard_t *s = &p->shards[i];
        uint32_t g;
        if (s->nbytes == 0)
            continue;
        if (!rs__strmap_get(&first, s->tensor, &g)) {
            g = (uint32_t)i;
            ok = rs__strmap_put(&first, s->tensor, g);
        }
        order[n++] = (order_entry_t){g, i};
    }
    rs__strmap_free(&first);
    if (order == NULL || !ok) {
        free(order);
        return RS_ERR_NO_MEMORY;
    }
    qsort(order, n, sizeof(*order), by_group);
    *order_p = order;
    *n_p = n;
    return RS_OK;
}

/* One entry; `entry` is its index among the served entries (shards, or
 * pieces in cut-aligned staging) for its deltas, SIZE_MAX for none. */
static rs_status_t put_shard(rs_publisher_h p, rs_table_writer_h w,
                             const rs__publish_shard_t *s, size_t entry,
                             rs_diag_t *diag)
{
    char text[RS_DIGEST_STR_LEN + 1];
    rs_shard_desc_t d = {s->tensor, s->dtype, rs_dtype_size(s->dtype),
                         s->ndim, s->full_shape, p->session, 0,
                         (uint64_t)(uintptr_t)s->served, s->offset, s->shape,
                         NULL};
    if (p->params.digests) {
        rs_digest_format(rs_digest(s->served, (size_t)s->nbytes), text);
        d.digest = text;
    }
    char *extra = NULL;
    size_t extra_len = 0;
    if (entry != SIZE_MAX &&
        rs__publisher_delta_json(p, entry, &extra, &extra_len) != RS_OK)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    rs_status_t st = rs__table_writer_add_extra(w, &d, extra, extra_len, diag);
    free(extra);
    return st;
}

/* Cut-aligned staging: the shard's sub-boxes, each its own entry, from
 * pieces[*at] on (pieces are in shard order, so a shard's are adjacent). */
static rs_status_t put_pieces(rs_publisher_h p, rs_table_writer_h w,
                              size_t shard, size_t at, rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    for (size_t i = at; st == RS_OK && i < p->pieces_len &&
                        p->pieces[i].shard == shard; i++) {
        const rs__publish_piece_t *piece = &p->pieces[i];
        rs__publish_shard_t sub = p->shards[shard];
        memcpy(sub.offset, piece->offset, sizeof(sub.offset));
        memcpy(sub.shape, piece->shape, sizeof(sub.shape));
        sub.served = piece->served;
        sub.nbytes = piece->nbytes;
        st = put_shard(p, w, &sub, i, diag);
    }
    return st;
}

/* first[i]: the index of shard i's first piece (pieces_len when none);
 * NULL outside cut-aligned staging. */
static size_t *piece_starts(rs_publisher_h p)
{
    size_t *first = malloc((p->shards_len + 1) * sizeof(*first));
    if (first == NULL)
        return NULL;
    for (size_t i = 0; i <= p->shards_len; i++)
        first[i] = p->pieces_len;
    for (size_t k = p->pieces_len; k-- > 0;)
        first[p->pieces[k].shard] = k;
    return first;
}

/* Quantized pieces in table order: by source tensor, spec, then shard,
 * so each derived tensor's entries are adjacent. */
static int by_qtensor(const void *a, const void *b, void *arg)
{
    rs_publisher_h p = arg;
    const rs__publish_quant_piece_t *x = &p->qpieces[*(const size_t *)a];
    const rs__publish_quant_piece_t *y = &p->qpieces[*(const size_t *)b];
    int c = strcmp(p->shards[x->shard].tensor, p->shards[y->shard].tensor);
    if (c == 0)
        c = strcmp(x->spec, y->spec);
    if (c == 0)
        c = x->shard < y->shard ? -1 : x->shard > y->shard;
    return c;
}

/* One quantized piece's entry: its FP8 values (scale 0) or its scales. */
static rs_status_t put_qpiece(rs_publisher_h p, rs_table_writer_h w,
                              size_t k, int scale, rs_diag_t *diag)
{
    const rs__publish_quant_piece_t *q = &p->qpieces[k];
    const rs__publish_shard_t *s = &p->shards[q->shard];
    rs__publish_shard_t sub = *s;
    const char *suffix = scale ? RS_QUANT_SCALE_SUFFIX : "";
    size_t len = strlen(s->tensor) + strlen(q->spec) + strlen(suffix) + 2;
    char *name = malloc(len);
    if (name == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    snprintf(name, len, "%s%c%s%s", s->tensor, RS_QUANT_NAME_SEP, q->spec,
             suffix);
    sub.tensor = name;
    sub.dtype = scale ? RS_DTYPE_F32 : q->format;
    if (scale)
        memcpy(sub.full_shape, q->grid, sizeof(sub.full_shape));
    memcpy(sub.offset, scale ? q->glo : q->lo, sizeof(sub.offset));
    memcpy(sub.shape, scale ? q->glen : q->len, sizeof(sub.shape));
    sub.served = scale ? q->scale_served : q->served;
    sub.nbytes = scale ? q->scale_nbytes : q->nbytes;
    rs_status_t st = put_shard(p, w, &sub,
                               rs__publisher_quant_entry(p, k, scale), diag);
    free(name);
    return st;
}

/* Every quantized piece, each derived tensor's entries together: a run of
 * pieces of one (tensor, spec) is written as values, then as scales. */
static rs_status_t put_qpieces(rs_publisher_h p, rs_table_writer_h w,
                               rs_diag_t *diag)
{
    size_t n = p->qpieces_len;
    if (n == 0)
        return RS_OK;
    size_t *order = malloc(n * sizeof(*order));
    if (order == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof(*order), by_qtensor, p);
    rs_status_t st = RS_OK;
    for (size_t a = 0, b; st == RS_OK && a < n; a = b) {
        const rs__publish_quant_piece_t *first = &p->qpieces[order[a]];
        for (b = a + 1; b < n; b++) {
            const rs__publish_quant_piece_t *q = &p->qpieces[order[b]];
            if (strcmp(q->spec, first->spec) != 0 ||
                strcmp(p->shards[q->shard].tensor,
                       p->shards[first->shard].tensor) != 0)
                break;
        }
        for (int scale = 0; scale < 2; scale++)
            for (size_t k = a; st == RS_OK && k < b; k++)
                st = put_qpiece(p, w, order[k], scale, diag);
    }
    free(order);
    return st;
}

static rs_status_t write_table(rs_publisher_h p, FILE *out,
                               const rs_table_info_t *info, rs_diag_t *diag)
{
    order_entry_t *order;
    size_t n;
    rs_table_writer_h w;
    rs_status_t st = shard_order(p, &order, &n);

    if (st != RS_OK)
        return rs__diag_set(diag, st, "out of memory");
    if ((st = rs_table_writer_open(out, info, diag, &w)) != RS_OK) {
        free(order);
        return st;
    }
    size_t *first = p->cut_mode ? piece_starts(p) : NULL;
    if (p->cut_mode && first == NULL)
        st = rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; st == RS_OK && i < n; i++) {
        size_t k = order[i].index;
        st = first != NULL ? put_pieces(p, w, k, first[k], diag)
                           : put_shard(p, w, &p->shards[k], k, diag);
    }
    free(first);
    free(order);
    if (st == RS_OK)
        st = put_qpieces(p, w, diag);
    if (st != RS_OK) {
        rs_table_writer_discard(w);
        return st;
    }
    return rs_table_writer_close(w, diag);
}

rs_status_t rs__publisher_table(rs_publisher_h p, int64_t version,
                                char **json_p, size_t *len_p, rs_diag_t *diag)
{
    const void *blob;
    size_t blob_len, len = 0;
    char *b64 = NULL, *text = NULL;
    rs_table_info_t info = {p->session, NULL, NULL, version};
    rs_status_t st = rs_exposer_blob(p->exposer, &blob, &blob_len);
    if (st == RS_OK)
        st = rs__base64_encode(blob, blob_len, &b64);
    if (st != RS_OK)
        return rs__diag_set(diag, st, "publisher: cannot encode the "
                            "transport blob");
    info.agent_meta_b64 = b64;
    FILE *out = open_memstream(&text, &len);
    if (out == NULL) {
        free(b64);
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    }
    st = write_table(p, out, &info, diag);
    fclose(out);
    free(b64);
    if (st != RS_OK) {
        free(text);
        return st;
    }
    *json_p = text;
    *len_p = len;
    return RS_OK;
}

/* ---- the geometry key ---------------------------------------------------
 * A digest of what the table says about the shards served, minus what
 * differs between data-parallel replicas and between a rank and its
 * restarted self (session name, addresses, transport keys, digests). Two
 * publishers with the same key may stand in for each other. */

static void feed_i64(rs_digest_t *d, const int64_t *v, int n)
{
    rs_digest_update(d, v, (size_t)n * sizeof(int64_t));
}

/* One shard's part of the key. */
static uint64_t shard_key(const rs__publish_shard_t *s)
{
    rs_digest_t d;
    uint64_t n = strlen(s->tensor);
    int64_t head[2] = {s->dtype, s->ndim};
    rs_digest_init(&d);
    rs_digest_update(&d, &n, sizeof(n));
    rs_digest_update(&d, s->tensor, (size_t)n);
    feed_i64(&d, head, 2);
    feed_i64(&d, s->full_shape, s->ndim);
    feed_i64(&d, s->offset, s->ndim);
    feed_i64(&d, s->shape, s->ndim);
    return rs_digest_final(&d);
}

/* A sum of the shards' keys, so replicas that register the same shards in
 * another order agree (and a shard registered twice is not cancelled, as
 * it would be by xor). */
uint64_t rs__publisher_geometry(rs_publisher_h p)
{
    uint64_t sum = 0, count = 0;
    for (size_t i = 0; i < p->shards_len; i++) {
        if (p->shards[i].nbytes == 0) /* left out of the table too */
            continue;
        sum += shard_key(&p->shards[i]);
        count++;
    }
    uint64_t parts[2] = {sum, count};
    return rs_digest(parts, sizeof(parts));
}
