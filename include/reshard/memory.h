/* Where a buffer handed to reshard lives. Every call that takes caller
 * memory (rs_publisher_register, rs_receiver_bind, rs_exec_bind,
 * rs_exposer_add_region) says which kind it is, so that device memory is
 * named and refused up front instead of being read by host code (a digest,
 * a shadow copy, a cast) and crashing. This version moves host memory only;
 * the other kinds are reserved so callers can already say what they hold.
 *
 * Threads: everything here is a pure function, safe from any thread. */
#ifndef RESHARD_MEMORY_H
#define RESHARD_MEMORY_H

#include <stdint.h>
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RS_MEM_HOST = 0, /* ordinary process memory (malloc, mmap, pinned) */
    RS_MEM_CUDA = 1, /* CUDA device memory: refused (RS_ERR_UNSUPPORTED) */
    RS_MEM_ROCM = 2  /* ROCm device memory: refused (RS_ERR_UNSUPPORTED) */
} rs_mem_type_t;

/* "host", "cuda", "rocm"; "invalid" for any other value. Never NULL. */
RS_API const char *rs_mem_type_str(rs_mem_type_t mem);

/* The host memory there is to allocate now: the smaller of the kernel's
 * MemAvailable (/proc/meminfo) and what the address-space limit
 * (RLIMIT_AS) leaves above this process's size. *source_p names where the
 * figure came from ("MemAvailable", "RLIMIT_AS"; "unknown" with
 * UINT64_MAX when neither can be read). The environment variable
 * RESHARD_MEMORY_AVAILABLE=SIZE (rs_parse_bytes) replaces the figure
 * (source "RESHARD_MEMORY_AVAILABLE"), for tests and for operators who
 * know better. The executor checks its staging against it before
 * allocating, and `reshard pull` the parameters and their shadows.
 * Errors: RS_ERR_INVALID_ARG (NULL), RS_ERR_INPUT (the variable is not a
 * size). */
RS_API rs_status_t rs_memory_available(uint64_t *bytes_p,
                                       const char **source_p);

#ifdef __cplusplus
}
#endif
#endif
