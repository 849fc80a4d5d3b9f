/* The shard-table writer's internal entry point (sources_write.c): a
 * shard with a fragment of further keys (", \"key\": value...", written
 * verbatim before the shard's closing brace), for keys the public
 * descriptor does not carry (a publisher's deltas, docs/formats.md
 * "Deltas"). */
#ifndef RS_MODEL_TABLE_WRITER_H
#define RS_MODEL_TABLE_WRITER_H

#include <stddef.h>

#include "reshard/sources.h"

rs_status_t rs__table_writer_add_extra(rs_table_writer_h w,
                                       const rs_shard_desc_t *d,
                                       const char *extra, size_t extra_len,
                                       rs_diag_t *diag);

#endif
