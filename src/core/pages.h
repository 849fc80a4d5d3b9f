/* Whole pages for buffers the library owns and fills at memory speed
 * (executor staging, receiver shadows): page-aligned, and for large ones
 * aligned to 2 MiB and offered to transparent huge pages, which also takes
 * a TLB miss off most accesses of a strided replay. */
#ifndef RS_CORE_PAGES_H
#define RS_CORE_PAGES_H

#include <stddef.h>

/* Buffers of at least this many bytes are 2 MiB aligned and advised
 * MADV_HUGEPAGE (the kernel may still back them with small pages). */
#define RS__PAGES_HUGE ((size_t)2 << 20)

/* nbytes (0 counts as 1) of zeroed memory aligned to at least 4096 bytes,
 * or NULL when the system has none (or nbytes overflows once rounded).
 * Free with rs__pages_free and the same nbytes. One mmap per call. */
void *rs__pages_alloc(size_t nbytes);

/* Frees what rs__pages_alloc(nbytes) returned; NULL is ignored. */
void rs__pages_free(void *p, size_t nbytes);

#endif
