/* Temporary files and folders of the tests (tmp_path.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tmp_path.h"

char *tmp_write(const char *tag, const void *data, size_t len)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "/tmp/rs-%.80s-XXXXXX", tag);
    int fd = mkstemp(buf);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    char *path = strdup(buf);
    assert_non_null(path);
    return path;
}

void tmp_dir(char *out, size_t n, const char *tag)
{
    snprintf(out, n, "/tmp/rs-%.80s-XXXXXX", tag);
    assert_non_null(mkdtemp(out));
}

int tmp_remove(const char *path)
{
    char cmd[4200];
    if (path[0] == '\0')
        return 0;
    snprintf(cmd, sizeof(cmd), "rm -rf '%.4096s'", path);
    if (system(cmd) == 0)
        return 0;
    fprintf(stderr, "could not remove %s\n", path);
    return -1;
}
