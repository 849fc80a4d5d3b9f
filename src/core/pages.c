/* Page-aligned buffers from anonymous mappings. A large buffer is mapped
 * with 2 MiB of slack and trimmed to a 2 MiB boundary on both sides, so
 * the kernel can back it with huge pages when it is in `madvise` mode. */
#include <stdint.h>
#include <sys/mman.h>

#include "core/pages.h"

#define PAGE ((size_t)4096)

/* nbytes rounded up to `align` (a power of two), or 0 on overflow. */
static size_t round_up(size_t nbytes, size_t align)
{
    if (nbytes == 0)
        nbytes = 1;
    if (nbytes > SIZE_MAX - (align - 1))
        return 0;
    return (nbytes + align - 1) & ~(align - 1);
}

static size_t mapped_len(size_t nbytes)
{
    return round_up(nbytes, nbytes >= RS__PAGES_HUGE ? RS__PAGES_HUGE : PAGE);
}

static void *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Maps len + 2 MiB and unmaps what lies outside the aligned middle. */
static void *map_huge(size_t len)
{
    if (len > SIZE_MAX - RS__PAGES_HUGE)
        return NULL;
    unsigned char *raw = map(len + RS__PAGES_HUGE);
    if (raw == NULL)
        return NULL;
    uintptr_t at = ((uintptr_t)raw + RS__PAGES_HUGE - 1) &
                   ~(uintptr_t)(RS__PAGES_HUGE - 1);
    size_t head = (size_t)(at - (uintptr_t)raw);
    if (head > 0)
        munmap(raw, head);
    munmap((unsigned char *)at + len, RS__PAGES_HUGE - head);
#ifdef MADV_HUGEPAGE
    (void)madvise((void *)at, len, MADV_HUGEPAGE); /* advice: may be refused */
#endif
    return (void *)at;
}

void *rs__pages_alloc(size_t nbytes)
{
    size_t len = mapped_len(nbytes);
    if (len == 0)
        return NULL;
    return len >= RS__PAGES_HUGE ? map_huge(len) : map(len);
}

void rs__pages_free(void *p, size_t nbytes)
{
    if (p != NULL)
        munmap(p, mapped_len(nbytes));
}
