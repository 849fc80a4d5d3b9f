/* File primitives of the file:DIR directory backend: paths inside a version
 * directory, crash-safe writes (temporary file in the same directory,
 * fsync, then rename or link into place), whole-file reads, the per-version
 * flock and the shared wall clock. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/diag.h"
#include "dir/file_impl.h"

rs_status_t rs__file_dir_path(rs_dir_h dir, const rs__dir_request_t *req,
                          const char *name, rs_diag_t *diag,
                          char out[PATH_MAX])
{
    const rs__file_dir_t *f = dir->priv;
    int n = name != NULL
                ? snprintf(out, PATH_MAX, "%s/%s/%lld/%s", f->root,
                           req->model, (long long)req->version, name)
                : snprintf(out, PATH_MAX, "%s/%s/%lld", f->root, req->model,
                           (long long)req->version);
    if (n < 0 || n >= PATH_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "directory %s: path of "
                            "version %lld of '%s' is too long", f->root,
                            (long long)req->version, req->model);
    return RS_OK;
}

#define LOCK_WAIT_S 30.0 /* one hold can span an fsync of a busy disk */

double rs__file_dir_now(void) { return rs__wall_s(); }

int rs__file_dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

void rs__file_dir_join(const char *dir, const char *name, char out[PATH_MAX])
{
    int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
    if (n < 0 || n >= PATH_MAX)
        out[0] = '\0'; /* not reached: file_open bounds the root's length */
}

void rs__file_dir_slot_name(int64_t slot, char out[RS_FDIR_NAME_LEN])
{
    snprintf(out, RS_FDIR_NAME_LEN, "slot-%lld", (long long)slot);
}

void rs__file_dir_entry_name(int64_t slot, const char *publisher,
                         char out[RS_FDIR_NAME_LEN])
{
    snprintf(out, RS_FDIR_NAME_LEN, "slot-%lld@%s", (long long)slot,
             publisher);
}

void rs__file_dir_hb_name(int64_t slot, const char *publisher,
                      char out[RS_FDIR_NAME_LEN])
{
    snprintf(out, RS_FDIR_NAME_LEN, "hb-%lld@%s", (long long)slot, publisher);
}

static rs_status_t io_fail(rs_diag_t *diag, const char *what,
                           const char *path)
{
    return rs__diag_set(diag, RS_ERR_IO, "%s %s: %s", what, path,
                        strerror(errno));
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

rs_status_t rs__file_dir_write_tmp(const char *dir, const char *name,
                               const void *data, size_t len, rs_diag_t *diag,
                               char tmp[PATH_MAX])
{
    static unsigned counter;
    unsigned id = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
    /* dot files are temporaries: listings skip them */
    int n = snprintf(tmp, PATH_MAX, "%s/.tmp-%ld-%u-%s", dir, (long)getpid(),
                     id, name);
    if (n < 0 || n >= PATH_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s/%s: path too long", dir,
                            name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return io_fail(diag, "cannot create", tmp);
    if (write_all(fd, data, len) != 0 || fsync(fd) != 0) {
        rs_status_t st = io_fail(diag, "cannot write", tmp);
        close(fd);
        unlink(tmp);
        return st;
    }
    if (close(fd) != 0) {
        rs_status_t st = io_fail(diag, "cannot close", tmp);
        unlink(tmp);
        return st;
    }
    return RS_OK;
}

void rs__file_dir_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

rs_status_t rs__file_dir_replace(const char *dir, const char *name,
                             const void *data, size_t len, rs_diag_t *diag)
{
    char tmp[PATH_MAX], dst[PATH_MAX];
    int n = snprintf(dst, sizeof(dst), "%s/%s", dir, name);
    if (n < 0 || n >= PATH_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s/%s: path too long", dir,
                            name);
    rs_status_t st = rs__file_dir_write_tmp(dir, name, data, len, diag, tmp);
    if (st != RS_OK)
        return st;
    if (rename(tmp, dst) != 0) {
        st = io_fail(diag, "cannot rename into", dst);
        unlink(tmp);
        return st;
    }
    rs__file_dir_sync_dir(dir);
    return RS_OK;
}

static rs_status_t read_fd(int fd, const char *path, size_t limit,
                           rs_diag_t *diag, char **data_p, size_t *len_p)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return io_fail(diag, "cannot stat", path);
    if ((uint64_t)st.st_size > (uint64_t)limit)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s: %lld bytes, more than "
                            "the %zu-byte limit", path,
                            (long long)st.st_size, limit);
    size_t size = (size_t)st.st_size, got = 0;
    char *buf = malloc(size + 1);
    if (buf == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "%s: out of memory", path);
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(buf);
            return n < 0 ? io_fail(diag, "cannot read", path)
                         : rs__diag_set(diag, RS_ERR_IO, "%s: shorter than "
                                        "its size", path);
        }
        got += (size_t)n;
    }
    buf[size] = '\0';
    *data_p = buf;
    *len_p = size;
    return RS_OK;
}

rs_status_t rs__file_dir_read(const char *path, size_t limit, rs_diag_t *diag,
                          int *absent_p, char **data_p, size_t *len_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        *absent_p = 1;
        return RS_OK;
    }
    if (fd < 0)
        return io_fail(diag, "cannot open", path);
    rs_status_t st = read_fd(fd, path, limit, diag, data_p, len_p);
    close(fd);
    if (st == RS_OK)
        *absent_p = 0;
    return st;
}

rs_status_t rs__file_dir_read_time(const char *path, rs_diag_t *diag,
                               int *absent_p, double *t_p)
{
    char *text = NULL, *end;
    size_t len;
    int absent;
    rs_status_t st = rs__file_dir_read(path, 64, diag, &absent, &text, &len);
    if (st != RS_OK)
        return st;
    if (absent) {
        *absent_p = 1;
        return RS_OK;
    }
    double t = strtod(text, &end);
    int ok = end != text && (*end == '\n' || *end == '\0');
    free(text);
    if (!ok)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s: expected one decimal "
                            "time in seconds", path);
    *absent_p = 0;
    *t_p = t;
    return RS_OK;
}

rs_status_t rs__file_dir_write_time(const char *dir, const char *name, double t,
                                rs_diag_t *diag)
{
    char text[64];
    int n = snprintf(text, sizeof(text), "%.6f\n", t);
    return rs__file_dir_replace(dir, name, text, (size_t)n, diag);
}

/* Every holder bumps a counter at the start of the lock file, so a waiter
 * can tell a lock that keeps changing hands (busy: many publishers) from
 * one held by a stopped process (nothing moves). */
static uint64_t lock_generation(int fd)
{
    uint64_t gen = 0;
    if (pread(fd, &gen, sizeof(gen), 0) != (ssize_t)sizeof(gen))
        gen = 0;
    return gen;
}

static void lock_taken(int fd)
{
    uint64_t gen = lock_generation(fd) + 1;
    if (pwrite(fd, &gen, sizeof(gen), 0) != (ssize_t)sizeof(gen))
        return; /* only waiters' patience depends on it */
}

rs_status_t rs__file_dir_lock(const char *vdir, rs_diag_t *diag, int *fd_p)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", vdir, RS_FDIR_LOCK);
    if (n < 0 || n >= PATH_MAX)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s: path too long", vdir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return io_fail(diag, "cannot open lock file", path);
    /* holders keep the lock for a few file operations: a lock that has not
     * changed hands for LOCK_WAIT_S belongs to a stopped process, and
     * waiting on it must end; one that keeps changing hands is only busy */
    uint64_t seen = lock_generation(fd);
    double deadline = rs__now_s() + LOCK_WAIT_S;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        rs_status_t st = RS_OK;
        uint64_t gen = lock_generation(fd);
        if (gen != seen) {
            seen = gen;
            deadline = rs__now_s() + LOCK_WAIT_S;
        }
        if (err != EWOULDBLOCK && err != EINTR) {
            errno = err;
            st = io_fail(diag, "cannot lock", path);
        } else if (rs__now_s() > deadline)
            st = rs__diag_set(diag, RS_ERR_TIMEOUT, "%s: held by one "
                              "process for more than %g s", path,
                              LOCK_WAIT_S);
        if (st != RS_OK) {
            close(fd);
            return st;
        }
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
    lock_taken(fd);
    *fd_p = fd;
    return RS_OK;
}

void rs__file_dir_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* closing the last descriptor drops the flock */
}
