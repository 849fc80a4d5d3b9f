/* The position log of merged sources (sources_log.c): while it is on,
 * every shard added is logged with its place, so a caller that loaded a
 * table can address that table's shards in the order its document listed
 * them, and replace their digests in place (a receiver taking a new
 * version's digests into sources parsed for an earlier one). */
#ifndef RS_MODEL_SOURCES_LOG_H
#define RS_MODEL_SOURCES_LOG_H

#include <stddef.h>

#include "reshard/sources.h"

/* Starts logging (dropping what was logged). Shards added by a load that
 * failed stay logged: drop such sources. */
void rs__sources_log_start(rs_sources_h s);

/* How many shards were logged. O(1). */
size_t rs__sources_logged(rs_sources_h s);

/* The digest of logged shard i (NULL when it has none). O(1). */
const char *rs__sources_logged_digest(rs_sources_h s, size_t i);

/* Replaces the digest of logged shard i by `text` (len bytes; NULL: none),
 * in place when the old one has the same length (as every rsd64 digest
 * has), else in the sources' arena. 0 when out of memory. O(len). */
int rs__sources_set_logged_digest(rs_sources_h s, size_t i, const char *text,
                                  size_t len);

#endif
