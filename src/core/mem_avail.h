/* What memory there is for the library to allocate, and the check a caller
 * runs before a large allocation (include/reshard/memory.h). */
#ifndef RS_CORE_MEM_AVAIL_H
#define RS_CORE_MEM_AVAIL_H

#include <stdint.h>

#include "reshard/status.h"

/* RS_OK when `need` bytes fit rs_memory_available; else RS_ERR_NO_MEMORY,
 * "<what> needs N (B bytes), and there is M (MemAvailable)", nothing
 * allocated. A malformed RESHARD_MEMORY_AVAILABLE is RS_ERR_INPUT. */
rs_status_t rs__mem_fits(uint64_t need, const char *what, rs_diag_t *diag);

#endif
