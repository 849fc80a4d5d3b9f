/* Sorting a plan's shard list by (session, addr), the order digest
 * verification reads it in. */
#ifndef RS_PLAN_SHARD_SORT_H
#define RS_PLAN_SHARD_SORT_H

#include <stddef.h>
#include "reshard/plan.h"

/* Sorts the malloc'd array *refs_p of n records by (session, addr),
 * stably (equal keys keep their order, as the qsort it replaces did in
 * glibc), replacing *refs_p with a sorted copy and freeing the old one.
 * O(n + sessions) when each session's addresses come in order, O(n log r)
 * on 16-byte keys otherwise (r: the ascending runs of a session's list). 0 on exhaustion (*refs_p unchanged). */
int rs__shard_refs_sort(rs_shard_ref_t **refs_p, size_t n);

#endif
