/* What memory there is: the smaller of the kernel's MemAvailable (what can
 * be allocated without swapping) and what the address-space limit
 * (RLIMIT_AS) leaves above the process's current size. Large allocations
 * (receiver shadows, executor staging, the CLI's parameters) are checked
 * against it first, so a pull that cannot fit fails with both figures
 * instead of being killed halfway. RESHARD_MEMORY_AVAILABLE=SIZE replaces
 * the figure, so tests are deterministic whatever the machine holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/diag.h"
#include "core/mem_avail.h"
#include "reshard/memory.h"
#include "reshard/units.h"

#define ENV_NAME "RESHARD_MEMORY_AVAILABLE"

/* MemAvailable from /proc/meminfo, in bytes; 0 when it cannot be read. */
static uint64_t meminfo_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    int found = 0;
    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(f);
    return found ? (uint64_t)kib * 1024 : 0;
}

/* The address space this process holds now (/proc/self/statm's first
 * field, in pages); 0 when it cannot be read. */
static uint64_t address_space_used(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu", &pages) != 1)
        pages = 0;
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return (uint64_t)pages * (uint64_t)(page > 0 ? page : 4096);
}

/* What RLIMIT_AS leaves; UINT64_MAX without a limit. */
static uint64_t rlimit_left(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return UINT64_MAX;
    uint64_t used = address_space_used();
    return (uint64_t)rl.rlim_cur > used ? (uint64_t)rl.rlim_cur - used : 0;
}

rs_status_t rs_memory_available(uint64_t *bytes_p, const char **source_p)
{
    const char *env = getenv(ENV_NAME);
    if (bytes_p == NULL || source_p == NULL)
        return RS_ERR_INVALID_ARG;
    if (env != NULL && env[0] != '\0') {
        uint64_t v;
        if (rs_parse_bytes(env, &v) != RS_OK)
            return RS_ERR_INPUT;
        *bytes_p = v;
        *source_p = ENV_NAME;
        return RS_OK;
    }
    uint64_t mem = meminfo_available(), lim = rlimit_left();
    if (mem == 0 && lim == UINT64_MAX) {
        *bytes_p = UINT64_MAX;
        *source_p = "unknown";
    } else if (mem != 0 && mem <= lim) {
        *bytes_p = mem;
        *source_p = "MemAvailable";
    } else {
        *bytes_p = lim;
        *source_p = "RLIMIT_AS";
    }
    return RS_OK;
}

rs_status_t rs__mem_fits(uint64_t need, const char *what, rs_diag_t *diag)
{
    uint64_t have;
    const char *source;
    char n[RS_UNITS_TEXT_MAX], h[RS_UNITS_TEXT_MAX];
    if (rs_memory_available(&have, &source) != RS_OK)
        return rs__diag_set(diag, RS_ERR_INPUT, "environment variable "
                            ENV_NAME "='%s' is not a size (bytes, or a "
                            "number with KiB, MiB, GiB or TiB)",
                            getenv(ENV_NAME));
    if (need <= have)
        return RS_OK;
    return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s needs %s (%llu bytes), "
                        "and there is %s (%llu bytes, %s): nothing was "
                        "allocated", what, rs_format_bytes(n, sizeof(n), need),
                        (unsigned long long)need,
                        rs_format_bytes(h, sizeof(h), have),
                        (unsigned long long)have, source);
}
