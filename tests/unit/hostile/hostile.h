/* Helpers shared by the hostile-input tests: an error check that prints the
 * message on failure and demands that it names what is wrong, and a count
 * of this process's open file descriptors (so every failing operation can
 * be shown not to leak one). Header-only: each test is its own program. */
#ifndef RS_TEST_HOSTILE_H
#define RS_TEST_HOSTILE_H

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "reshard/status.h"

/* Open descriptors, not counting the one used to list them. */
static inline int hostile_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

/* Checks that a call failed with `want` and that its message holds every
 * one of the NULL-terminated fragments (the tensor, the field, the file...). */
static inline void hostile_expect_(const char *file, int line,
                                   rs_status_t got, rs_status_t want,
                                   const rs_diag_t *diag, ...)
{
    va_list ap;
    const char *frag;
    int ok = got == want && diag->status == want;

    va_start(ap, diag);
    while (ok && (frag = va_arg(ap, const char *)) != NULL)
        ok = strstr(diag->msg, frag) != NULL;
    va_end(ap);
    if (ok)
        return;
    va_start(ap, diag);
    fprintf(stderr, "%s:%d: expected %s, got %s (diag %s): \"%s\"\n", file,
            line, rs_status_str(want), rs_status_str(got),
            rs_status_str(diag->status), diag->msg);
    while ((frag = va_arg(ap, const char *)) != NULL)
        fprintf(stderr, "  wanted in message: \"%s\"%s\n", frag,
                strstr(diag->msg, frag) ? "" : "  <-- missing");
    va_end(ap);
    fail();
}

#define HOSTILE_EXPECT(got, want, diag, ...)                                  \
    hostile_expect_(__FILE__, __LINE__, (got), (want), (diag), __VA_ARGS__,   \
                    (const char *)NULL)

#endif
