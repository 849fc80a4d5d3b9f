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

#ifdef __cplusplus
}
#endif
#endif
