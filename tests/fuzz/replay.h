/* Replays the saved reproducers of a fuzz target (tests/fuzz/regressions/
 * <target>/) through its harness, compiled into an ordinary test: each one
 * once crashed or tripped a sanitizer and must now end cleanly. */
#ifndef RS_FUZZ_REPLAY_H
#define RS_FUZZ_REPLAY_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fz_target_cb)(const uint8_t *data, size_t size);

/* Reads a whole file; NULL when it cannot. */
static inline uint8_t *fz_read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *p = realloc(buf, cap *= 2);
            if (p == NULL)
                free(buf);
            buf = p;
        }
    }
    fclose(f);
    *len_p = len;
    return buf;
}

/* Runs every file of the target's regression folder through fn; returns
 * how many ran, or -1 when the folder cannot be read. The folder is found
 * through RESHARD_SOURCE_DIR (set by CTest), else the working directory. */
static inline int fz_replay(const char *target, fz_target_cb fn)
{
    const char *top = getenv("RESHARD_SOURCE_DIR");
    char folder[4096], path[8192];
    snprintf(folder, sizeof(folder), "%s/tests/fuzz/regressions/%s",
             top != NULL ? top : ".", target);
    DIR *d = opendir(folder);
    if (d == NULL)
        return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", folder, e->d_name);
        size_t len = 0;
        uint8_t *data = fz_read_file(path, &len);
        if (data == NULL)
            continue;
        fprintf(stderr, "replaying %s\n", path);
        fn(data, len);
        free(data);
        count++;
    }
    closedir(d);
    return count;
}

#endif
