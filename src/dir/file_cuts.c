/* Cuts records of the file:DIR backend: DIR/<model>/cuts/<holder>, one
 * file per holder, each replaced atomically (temporary file, fsync,
 * rename), so no lock is needed: concurrent holders write different files
 * and a reader sees each file whole. A file starts with its generation,
 * "rsd64:<16 hex>\n" (the digest of the bytes after it), so the stamp
 * travels with the record in one rename and a listing reads 23 bytes per
 * holder, never a record. Version listings skip the folder (its name is
 * not a version number). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/diag.h"
#include "dir/file_impl.h"
#include "reshard/digest.h"

#define CUTS_FOLDER "cuts"
/* "rsd64:<16 hex>\n": RS_DIGEST_STR_LEN counts a NUL where the line has
 * its newline */
#define STAMP_LEN RS_DIGEST_STR_LEN

/* DIR/<model>/cuts, created (with DIR/<model>) when `create`. */
static rs_status_t cuts_dir(rs_dir_h dir, const rs__dir_request_t *req, int create,
                            rs_diag_t *diag, char out[PATH_MAX])
{
    const rs__file_dir_t *f = dir->priv;
    char mdir[PATH_MAX];
    rs__file_dir_join(f->root, req->model, mdir);
    rs__file_dir_join(mdir, CUTS_FOLDER, out);
    if (!create)
        return RS_OK;
    if ((mkdir(mdir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(out, 0755) != 0 && errno != EEXIST))
        return rs__diag_set(diag, RS_ERR_IO, "directory %s: cannot create "
                            "%s: %s", f->root, out, strerror(errno));
    return RS_OK;
}

/* Reads len bytes at off; 0 when they are all there. */
static int read_at(int fd, uint64_t off, char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = pread(fd, buf, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

/* An open record file: its generation and where its record starts. A
 * file without a stamp (written before stamps, or by hand) is all record,
 * its generation a digest of what stat(2) says of it, which a rename or a
 * rewrite changes. */
typedef struct opened {
    int fd;
    int stamped;
    uint64_t generation;
    uint64_t start, len;
} opened_t;

static void read_stamp(const struct stat *sb, opened_t *o)
{
    char text[STAMP_LEN + 1];
    uint64_t size = (uint64_t)sb->st_size;
    o->stamped = 0;
    if (size >= STAMP_LEN && read_at(o->fd, 0, text, STAMP_LEN) == 0 &&
        text[STAMP_LEN - 1] == '\n') {
        text[STAMP_LEN - 1] = '\0';
        o->stamped = rs_digest_parse(text, &o->generation) == RS_OK;
    }
    o->start = o->stamped ? STAMP_LEN : 0;
    o->len = size - o->start;
    if (!o->stamped) {
        int64_t id[5] = {(int64_t)sb->st_dev, (int64_t)sb->st_ino,
                         (int64_t)sb->st_size, (int64_t)sb->st_mtim.tv_sec,
                         (int64_t)sb->st_mtim.tv_nsec};
        o->generation = rs_digest(id, sizeof(id));
    }
}

/* Opens cdir/name; *absent_p = 1 when it does not exist (dropped). */
static rs_status_t open_record(const char *cdir, const char *name,
                               opened_t *o, int *absent_p, rs_diag_t *diag)
{
    char path[PATH_MAX];
    struct stat sb;
    rs__file_dir_join(cdir, name, path);
    *absent_p = 0;
    o->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (o->fd < 0 && errno == ENOENT) {
        *absent_p = 1;
        return RS_OK;
    }
    if (o->fd < 0 || fstat(o->fd, &sb) != 0) {
        rs_status_t st = rs__diag_set(diag, RS_ERR_IO, "cannot read %s: %s",
                                      path, strerror(errno));
        if (o->fd >= 0)
            close(o->fd);
        return st;
    }
    read_stamp(&sb, o);
    return RS_OK;
}

/* Whether cdir/holder holds exactly `len` bytes `data` with generation
 * `gen` already (then writing them again would change nothing). */
static int holds_already(const char *cdir, const char *holder,
                         const void *data, size_t len, uint64_t gen)
{
    opened_t o;
    int absent = 0, same = 0;
    rs_diag_t ignored;
    if (open_record(cdir, holder, &o, &absent, &ignored) != RS_OK || absent)
        return 0;
    if (o.stamped && o.generation == gen && o.len == len) {
        char *old = malloc(len + 1);
        same = old != NULL && read_at(o.fd, o.start, old, len) == 0 &&
               memcmp(old, data, len) == 0;
        free(old);
    }
    close(o.fd);
    return same;
}

rs_status_t rs__file_dir_put_cuts(rs_dir_h dir, rs__dir_request_t *req,
                              rs_diag_t *diag)
{
    char cdir[PATH_MAX];
    rs_status_t st = cuts_dir(dir, req, 1, diag, cdir);
    if (st != RS_OK ||
        holds_already(cdir, req->holder, req->table, req->len,
                      req->generation))
        return st;
    char *buf = malloc(STAMP_LEN + req->len + 1);
    if (buf == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts record of holder "
                            "'%s': out of memory", req->holder);
    rs_digest_format(req->generation, buf);
    buf[STAMP_LEN - 1] = '\n';
    memcpy(buf + STAMP_LEN, req->table, req->len);
    st = rs__file_dir_replace(cdir, req->holder, buf, STAMP_LEN + req->len, diag);
    free(buf);
    return st;
}

rs_status_t rs__file_dir_drop_cuts(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    char cdir[PATH_MAX], path[PATH_MAX];
    cuts_dir(dir, req, 0, diag, cdir);
    rs__file_dir_join(cdir, req->holder, path);
    if (unlink(path) != 0 && errno != ENOENT)
        return rs__diag_set(diag, RS_ERR_IO, "cannot remove %s: %s", path,
                            strerror(errno));
    rs__file_dir_sync_dir(cdir);
    return RS_OK;
}

/* The record of an open file into rec: its bytes, or its size only when
 * above the cap; stamped bytes are checked against their stamp. */
static rs_status_t load_record(const rs__dir_request_t *req, const char *name,
                               const opened_t *o, rs_dir_cuts_record_t *rec,
                               rs_diag_t *diag)
{
    snprintf(rec->holder, sizeof(rec->holder), "%s", name);
    rec->json = NULL;
    rec->len = (size_t)o->len;
    rec->generation = o->generation;
    if (o->len > (uint64_t)RS_DIR_CUTS_MAX)
        return RS_OK;
    if ((rec->json = malloc(rec->len + 1)) == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "cuts record of holder "
                            "'%s': out of memory", name);
    if (read_at(o->fd, o->start, rec->json, rec->len) != 0) {
        free(rec->json);
        rec->json = NULL;
        return rs__diag_set(diag, RS_ERR_IO, "cannot read the cuts record "
                            "of holder '%s' for '%s': %s", name, req->model,
                            errno ? strerror(errno) : "truncated");
    }
    rec->json[rec->len] = '\0';
    rs_status_t st = o->stamped ? rs__dir_cuts_check(req, rec, diag) : RS_OK;
    if (st != RS_OK) { /* not handed out: the caller frees only those */
        free(rec->json);
        rec->json = NULL;
    }
    return st;
}

/* Holder names only: temporaries are dot files, and anything else a
 * person left in the folder is not a record. */
static int record_name(const char *name)
{
    size_t n = strlen(name);
    if (name[0] == '.' || n == 0 || n > RS_DIR_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!rs__dir_name_char(name[i]))
            return 0;
    return 1;
}

/* Grows an array of `size`-byte items to hold one more. */
static rs_status_t grow(void **items, size_t count, size_t *cap, size_t size,
                        rs_diag_t *diag)
{
    if (count < *cap)
        return RS_OK;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = realloc(*items, ncap * size);
    if (p == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                            "memory");
    *items = p;
    *cap = ncap;
    return RS_OK;
}

/* One holder: its record (req->cuts) or its stamp (req->stamps). */
typedef rs_status_t (*visit_fn)(rs__dir_request_t *req, const char *name,
                                const opened_t *o, size_t *cap,
                                rs_diag_t *diag);

static rs_status_t visit_one(rs__dir_request_t *req, const char *cdir,
                             const char *name, visit_fn fn, size_t *cap,
                             rs_diag_t *diag)
{
    opened_t o;
    int absent = 0;
    rs_status_t st = open_record(cdir, name, &o, &absent, diag);
    if (st != RS_OK || absent)
        return st;
    st = fn(req, name, &o, cap, diag);
    close(o.fd);
    return st;
}

static rs_status_t add_record(rs__dir_request_t *req, const char *name,
                              const opened_t *o, size_t *cap, rs_diag_t *diag)
{
    rs_status_t st = grow((void **)&req->cuts, req->ncuts, cap,
                          sizeof(*req->cuts), diag);
    if (st == RS_OK)
        st = load_record(req, name, o, &req->cuts[req->ncuts], diag);
    if (st == RS_OK)
        req->ncuts++;
    return st;
}

static rs_status_t add_stamp(rs__dir_request_t *req, const char *name,
                             const opened_t *o, size_t *cap, rs_diag_t *diag)
{
    rs_status_t st = grow((void **)&req->stamps, req->nstamps, cap,
                          sizeof(*req->stamps), diag);
    if (st != RS_OK)
        return st;
    rs_dir_cuts_stamp_t *s = &req->stamps[req->nstamps++];
    snprintf(s->holder, sizeof(s->holder), "%s", name);
    s->generation = o->generation;
    s->len = (size_t)o->len;
    return RS_OK;
}

/* Every holder of the folder; a missing folder holds none. */
static rs_status_t visit_all(rs_dir_h dir, rs__dir_request_t *req, visit_fn fn,
                             rs_diag_t *diag)
{
    char cdir[PATH_MAX];
    size_t cap = 0;
    cuts_dir(dir, req, 0, diag, cdir);
    DIR *d = opendir(cdir);
    if (d == NULL)
        return errno == ENOENT ? RS_OK
                               : rs__diag_set(diag, RS_ERR_IO, "cannot list "
                                              "%s: %s", cdir, strerror(errno));
    rs_status_t st = RS_OK;
    struct dirent *e;
    while (st == RS_OK && (e = readdir(d)) != NULL)
        if (record_name(e->d_name))
            st = visit_one(req, cdir, e->d_name, fn, &cap, diag);
    closedir(d);
    return st; /* on error the caller frees what was read */
}

rs_status_t rs__file_dir_read_cuts(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    char cdir[PATH_MAX];
    size_t cap = 0;
    req->cuts = NULL;
    req->ncuts = 0;
    if (req->holder == NULL)
        return visit_all(dir, req, add_record, diag);
    if (!record_name(req->holder)) /* "..", a temporary: never a record */
        return RS_OK;
    cuts_dir(dir, req, 0, diag, cdir);
    return visit_one(req, cdir, req->holder, add_record, &cap, diag);
}

rs_status_t rs__file_dir_list_cuts(rs_dir_h dir, rs__dir_request_t *req,
                               rs_diag_t *diag)
{
    req->stamps = NULL;
    req->nstamps = 0;
    return visit_all(dir, req, add_stamp, diag);
}
