/* Sorting a plan's shard list by (session, addr), the order digest
 * verification reads it in. */
#ifndef RS_PLAN_SHARD_SORT_H
#define RS_PLAN_SHARD_SORT_H

#include <stddef.h>
#include "reshard/plan.h"

/* Sorts refs[0..n) by (session, addr), stably (equal keys keep their
 * order, as the qsort it replaces did in glibc). O(n log n) on 16-byte
 * keys, then one pass moving the records. 0 on exhaustion (refs
 * unchanged). */
int rs__shard_refs_sort(rs_shard_ref_t *refs, size_t n);

#endif
