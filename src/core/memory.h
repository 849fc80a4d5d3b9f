/* The one check every entry point that takes caller memory runs before it
 * touches the pointer (include/reshard/memory.h). */
#ifndef RS_CORE_MEMORY_H
#define RS_CORE_MEMORY_H

#include "reshard/memory.h"
#include "reshard/status.h"

/* RS_OK for RS_MEM_HOST. RS_ERR_UNSUPPORTED for another known type,
 * RS_ERR_INVALID_ARG for a value outside the enum; the message starts with
 * `who` ("publisher: tensor 'w'") and names the type. The pointer itself is
 * never looked at. */
rs_status_t rs__mem_check(rs_mem_type_t mem, const char *who,
                          rs_diag_t *diag);

#endif
