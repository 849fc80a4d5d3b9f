/* Sorting a plan's shard list by (session, addr), the order digest
 * verification reads it in. */
#ifndef RS_PLAN_SHARD_SORT_H
#define RS_PLAN_SHARD_SORT_H

#include <stddef.h>
#include "reshard/plan.h"

/* Sorts, in place, each part refs[start .. end[k]) (start: end[k - 1], 0
 * for the first) whose unsorted[k] is set by address, stably (equal
 * addresses keep their order). The list is already grouped by session,
 * one part per session, so this is its (session, addr) order. O(n) for the
 * parts left alone, O(m log r) for a part of m records in r ascending
 * runs (sorting 16-byte keys, then moving each record once). 0 on
 * exhaustion (some parts may then be sorted, none is damaged). */
int rs__shard_refs_sort_parts(rs_shard_ref_t *refs, const size_t *end,
                              size_t nparts, const unsigned char *unsorted);

#endif
