/* Group commit of a receiver's apply (group.c; docs/refit.md, "Group
 * commit"): the ranks of one engine replica install a version together or
 * roll back together, decided by one record in the directory
 * (rs_dir_group_mark). */
#ifndef RS_REFIT_GROUP_H
#define RS_REFIT_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/dir.h"
#include "reshard/refit.h"

typedef struct rs__group rs__group_t;

/* What the receiver's install step lends the group commit: install (the
 * lease proof, the staging swapped with the live bytes so the staging
 * keeps what was replaced, the caller's install), undo (the replaced
 * bytes back into the live parameters: a no-op when nothing was
 * swapped) and keep (the staging made equal to the live bytes again once
 * the group committed). */
typedef struct rs__group_io {
    void *ctx;
    rs_status_t (*install)(void *ctx, rs_diag_t *diag);
    void (*undo)(void *ctx);
    void (*keep)(void *ctx);
} rs__group_io_t;

/* The group of params->group (NULL: *group_p = NULL, no group), checked:
 * RS_ERR_INVALID_ARG naming the field for a bad name, size, rank or
 * timeout, or a group without shadow staging (nothing to roll back to). */
rs_status_t rs__group_create(const rs_receiver_params_t *params,
                             const char *holder, rs_diag_t *diag,
                             rs__group_t **group_p);
void rs__group_destroy(rs__group_t *group);

/* The apply of `version` as one rank of the group: reports STAGED and
 * waits (bounded) for every rank to; installs through io; reports APPLIED
 * (or FAILED, undoing) and waits (bounded) for the group's decision; keeps
 * the new bytes on COMMITTED, undoes on ABORTED. On error the live
 * parameters hold the bytes they held before, and the message names the
 * group, the attempt and why (the ranks that never staged or applied, the
 * rank that failed). */
rs_status_t rs__group_apply(const rs__group_t *group, rs_dir_h dir,
                            const char *model, int64_t version,
                            const rs__group_io_t *io, rs_diag_t *diag);

/* Swaps n bytes between a and b (no allocation). O(n). */
void rs__group_swap(void *a, void *b, size_t n);

#endif
