/* Internal state of publishers and receivers. */
#ifndef RS_REFIT_REFIT_IMPL_H
#define RS_REFIT_REFIT_IMPL_H

#include <pthread.h>

#include "core/vec.h"
#include "reshard/dir.h"
#include "reshard/expose.h"
#include "reshard/refit.h"
#include "reshard/sources.h"
#include "reshard/transport.h"

typedef struct rs_pub_shard {
    char *tensor;
    rs_dtype_t dtype;
    int ndim;
    int64_t full_shape[RS_MAX_DIMS];
    int64_t offset[RS_MAX_DIMS];
    int64_t shape[RS_MAX_DIMS];
    void *ptr;
    uint64_t nbytes;
} rs_pub_shard_t;

struct rs_publisher {
    rs_publisher_params_t params; /* string fields below are owned copies */
    char *model, *backend, *session;
    rs_dir_h dir, hb_dir;
    rs_exposer_h exposer;
    int dirty;                    /* registrations changed since exposing */
    RS_VEC(rs_pub_shard_t, shards);
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t hb_thread;
    int hb_running, hb_stop;
    int64_t version;              /* heartbeat target */
    char *table;                  /* its published table, for republishing */
    size_t table_len;
};

/* This rank's mx.reshard.shard_table.v1 for a version (caller frees). */
rs_status_t rs__publisher_table(rs_publisher_h p, int64_t version,
                                char **json_p, size_t *len_p, rs_diag_t *diag);

/* A fingerprint of everything a plan and its connections depend on: each
 * table's agent and transport blob, each shard's tensor, dtype, geometry,
 * session and address. Digests and steps are left out: they change every
 * version without changing the topology. */
uint64_t rs__topology_fingerprint(rs_sources_h sources);

#endif
