/* Cuts records of the file:DIR backend: DIR/<model>/cuts/<holder>, one
 * file per holder, each replaced atomically (temporary file, fsync,
 * rename), so no lock is needed: concurrent holders write different files
 * and a reader sees each file whole. Version listings skip the folder
 * (its name is not a version number). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/diag.h"
#include "dir/file_impl.h"

#define CUTS_FOLDER "cuts"

/* DIR/<model>/cuts, created (with DIR/<model>) when `create`. */
static rs_status_t cuts_dir(rs_dir_h dir, const rs_dir_req_t *req, int create,
                            rs_diag_t *diag, char out[PATH_MAX])
{
    const rs_fdir_t *f = dir->priv;
    char mdir[PATH_MAX];
    rs__fdir_join(f->root, req->model, mdir);
    rs__fdir_join(mdir, CUTS_FOLDER, out);
    if (!create)
        return RS_OK;
    if ((mkdir(mdir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(out, 0755) != 0 && errno != EEXIST))
        return rs__diag_set(diag, RS_ERR_IO, "directory %s: cannot create "
                            "%s: %s", f->root, out, strerror(errno));
    return RS_OK;
}

rs_status_t rs__fdir_put_cuts(rs_dir_h dir, rs_dir_req_t *req,
                              rs_diag_t *diag)
{
    char cdir[PATH_MAX];
    rs_status_t st = cuts_dir(dir, req, 1, diag, cdir);
    if (st == RS_OK)
        st = rs__fdir_replace(cdir, req->holder, req->table, req->len, diag);
    return st;
}

rs_status_t rs__fdir_drop_cuts(rs_dir_h dir, rs_dir_req_t *req,
                               rs_diag_t *diag)
{
    char cdir[PATH_MAX], path[PATH_MAX];
    cuts_dir(dir, req, 0, diag, cdir);
    rs__fdir_join(cdir, req->holder, path);
    if (unlink(path) != 0 && errno != ENOENT)
        return rs__diag_set(diag, RS_ERR_IO, "cannot remove %s: %s", path,
                            strerror(errno));
    rs__fdir_sync_dir(cdir);
    return RS_OK;
}

/* One file of the folder into rec; *keep_p = 0 when it vanished since the
 * listing (dropped meanwhile). A file above the cap keeps only its size. */
static rs_status_t read_record(const char *cdir, const char *name,
                               rs_dir_cuts_record_t *rec, int *keep_p,
                               rs_diag_t *diag)
{
    char path[PATH_MAX];
    struct stat sb;
    int absent = 0;
    rs__fdir_join(cdir, name, path);
    *keep_p = 0;
    if (stat(path, &sb) != 0)
        return errno == ENOENT ? RS_OK
                               : rs__diag_set(diag, RS_ERR_IO, "cannot stat "
                                              "%s: %s", path, strerror(errno));
    snprintf(rec->holder, sizeof(rec->holder), "%s", name);
    rec->json = NULL;
    rec->len = (size_t)sb.st_size;
    if ((uint64_t)sb.st_size > (uint64_t)RS_DIR_CUTS_MAX) {
        *keep_p = 1;
        return RS_OK;
    }
    rs_status_t st = rs__fdir_read(path, RS_DIR_CUTS_MAX, diag, &absent,
                                   &rec->json, &rec->len);
    if (st == RS_ERR_INPUT) { /* grew past the cap since the stat */
        rec->json = NULL;
        st = RS_OK;
    }
    *keep_p = st == RS_OK && !absent;
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

static rs_status_t add_record(rs_dir_req_t *req, const char *cdir,
                              const char *name, size_t *cap, rs_diag_t *diag)
{
    if (req->ncuts == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        void *p = realloc(req->cuts, ncap * sizeof(*req->cuts));
        if (p == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                                "memory");
        req->cuts = p;
        *cap = ncap;
    }
    int keep = 0;
    rs_status_t st = read_record(cdir, name, &req->cuts[req->ncuts], &keep,
                                 diag);
    if (st == RS_OK && keep)
        req->ncuts++;
    return st;
}

rs_status_t rs__fdir_read_cuts(rs_dir_h dir, rs_dir_req_t *req,
                               rs_diag_t *diag)
{
    char cdir[PATH_MAX];
    size_t cap = 0;
    cuts_dir(dir, req, 0, diag, cdir);
    req->cuts = NULL;
    req->ncuts = 0;
    DIR *d = opendir(cdir);
    if (d == NULL)
        return errno == ENOENT ? RS_OK
                               : rs__diag_set(diag, RS_ERR_IO, "cannot list "
                                              "%s: %s", cdir, strerror(errno));
    rs_status_t st = RS_OK;
    struct dirent *e;
    while (st == RS_OK && (e = readdir(d)) != NULL)
        if (record_name(e->d_name))
            st = add_record(req, cdir, e->d_name, &cap, diag);
    closedir(d);
    return st; /* on error the caller frees what was read */
}
