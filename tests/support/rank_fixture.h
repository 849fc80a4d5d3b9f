/* An inference rank of the integration tests that pull from publisher
 * processes (proc_fixture.h): its capture, a receiver, every parameter
 * bound in host memory beside a copy of its prior bytes, the installs
 * counted; and the assertions on the live parameters after a pull. */
#ifndef RS_TEST_RANK_FIXTURE_H
#define RS_TEST_RANK_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/reshard.h"
#include "proc_fixture.h"
#include "reshard_layout/layout.h"

typedef struct pfx_rank {
    rs_capture_h cap;
    rs_receiver_h recv;
    uint8_t **params, **prior; /* [param][byte] */
    size_t nparams;
    int installs;              /* install callbacks so far */
} pfx_rank_t;

/* The prior contents a pull must not leave behind: byte b of param p is
 * b * 131 + p * 7 + 1, never the fill vllm_direct.h gives the shards. */
#define PFX_FILL_PATTERN (-1)

/* Opens rank `rank` of the checked layout `infer`: its capture, a receiver
 * created from rp (the fixture sets its install callback, which counts),
 * every parameter allocated, filled with `fill` (a byte, or
 * PFX_FILL_PATTERN), remembered as prior and bound. Fails the test on any
 * error. */
void pfx_rank_open(pfx_rank_t *ir, rs_model_h model, const rs_layout_t *infer,
                   int64_t rank, rs_receiver_params_t *rp, int fill);

/* Destroys the receiver and the capture, frees the parameters. */
void pfx_rank_close(pfx_rank_t *ir);

/* A teardown's work, on every path: closes the rank when it is open
 * (rank may be NULL), kills and reaps procs[0..n) and closes the world. */
void pfx_teardown(pfx_rank_t *rank, pfx_proc_t *procs, size_t n,
                  pfx_world_t *w);

/* Sets every parameter and its prior bytes to `byte`. */
void pfx_rank_fill(pfx_rank_t *ir, uint8_t byte);

/* Puts the prior bytes back, so a later pull is checked afresh. */
void pfx_rank_restore(pfx_rank_t *ir);

/* Every parameter still holds its prior bytes (a failed or staged pull). */
void pfx_expect_untouched(const pfx_rank_t *ir);

/* Every parameter p holds want[p] byte for byte, except bytes where want
 * is `pad` and the parameter kept its prior byte: padding no copy writes. */
void pfx_expect_installed(const pfx_rank_t *ir, uint8_t *const *want,
                          uint8_t pad);

/* The same against vLLM's loaders rebuilt for `rank` (vllm_direct.h,
 * padding 0xEE). */
void pfx_expect_direct(const pfx_rank_t *ir, rs_model_h model,
                       const rs_layout_t *infer, int64_t rank);

#endif
