/* Two refit mechanisms with files of their own: the lease a receiver holds
 * on a version while it reads (lease.c) and the topology fingerprint that
 * decides whether a cached plan still holds (fingerprint.c). The
 * publisher's and the receiver's state are in publisher_impl.h and
 * receiver_impl.h. */
#ifndef RS_REFIT_REFIT_IMPL_H
#define RS_REFIT_REFIT_IMPL_H

#include <pthread.h>

#include "reshard/dir.h"
#include "reshard/sources.h"

/* A receiver's lease for one pull (lease.c). */
typedef struct rs__lease {
    rs_dir_h dir;               /* the renewal thread's own connection */
    const char *model, *holder; /* borrowed from the receiver */
    int64_t version;
    uint64_t epoch;
    double ttl_s, period_s;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int taken, running, stop;
    /* under lock: */
    int lost;                   /* the directory said the lease is over */
    uint64_t renewals, errors;  /* renewals that succeeded / failed */
    char why[RS_DIAG_MSG_MAX];  /* how it was lost */
    char last_error[RS_DIAG_MSG_MAX];
} rs__lease_t;

/* Takes a fresh lease on `dir` and starts renewing it on `renew_dir` every
 * period_s (<= 0: ttl_s / 3), sooner after an error that leaves the lease's
 * state unknown. On error nothing is left running and no lease taken. */
rs_status_t rs__lease_start(rs__lease_t *lease, rs_dir_h dir,
                            rs_dir_h renew_dir, const char *model,
                            int64_t version, const char *holder, double ttl_s,
                            double period_s, rs_diag_t *diag);

/* The proof before install: no renewal found the lease over, and one more
 * renewal on `dir` (atomic with the check that the same epoch is live and
 * the version not RELEASED) succeeds, retried through a directory outage
 * for up to patience_s (and never past the ttl). Otherwise RS_ERR_VERIFY,
 * saying why (RS_ERR_INVALID_ARG when no lease was started). */
rs_status_t rs__lease_confirm(rs__lease_t *lease, rs_dir_h dir,
                              double patience_s, rs_diag_t *diag);

/* Stops the renewals (the lease itself stays until unleased or expired).
 * Accepts a lease that was never started. */
void rs__lease_stop(rs__lease_t *lease);
/* A fingerprint of everything a plan and its connections depend on: each
 * table's agent and transport blob, each shard's tensor, dtype, geometry,
 * session and address. Digests and steps are left out: they change every
 * version without changing the topology. */
uint64_t rs__topology_fingerprint(rs_sources_h sources);

#endif
