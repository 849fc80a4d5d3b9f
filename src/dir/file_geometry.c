/* Geometry documents of split entries (dir_split.c) in the file:DIR
 * backend: DIR/<model>/geometry/slot-<i>@<publisher>, one file per slot
 * and publisher holding "rsd64:<16 hex>\n" (the document's digest) and the
 * document, replaced atomically (temporary file, rename) and only when the
 * digest changes, so an unchanged geometry is written once and compared
 * by its first 23 bytes. It belongs to the model, not to a version: the
 * versions that name it come and go around it. No lock: one publisher
 * writes its own file. */
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

#define GEOMETRY_FOLDER "geometry"
#define STAMP_LEN RS_DIGEST_STR_LEN /* "rsd64:<16 hex>\n" */

/* DIR/<model>/geometry (created, with DIR/<model>, when `create`) and the
 * file of (slot, publisher) in it. */
static rs_status_t geometry_path(rs_dir_h dir, const rs__dir_request_t *req,
                                 int create, rs_diag_t *diag,
                                 char gdir[PATH_MAX], char path[PATH_MAX])
{
    const rs__file_dir_t *f = dir->priv;
    char mdir[PATH_MAX], name[RS_FDIR_NAME_LEN];
    rs__file_dir_join(f->root, req->model, mdir);
    rs__file_dir_join(mdir, GEOMETRY_FOLDER, gdir);
    rs__file_dir_entry_name(req->slot, req->publisher, name);
    rs__file_dir_join(gdir, name, path);
    if (create && ((mkdir(mdir, 0755) != 0 && errno != EEXIST) ||
                   (mkdir(gdir, 0755) != 0 && errno != EEXIST)))
        return rs__diag_set(diag, RS_ERR_IO, "directory %s: cannot create "
                            "%s: %s", f->root, gdir, strerror(errno));
    return RS_OK;
}

/* The digest stored at the start of path; 0 when there is none (no file,
 * or no stamp). */
static int stored_digest(const char *path, uint64_t *digest_p)
{
    char text[STAMP_LEN + 1];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, text, STAMP_LEN, 0);
    close(fd);
    if (n != STAMP_LEN || text[STAMP_LEN - 1] != '\n')
        return 0;
    text[STAMP_LEN - 1] = '\0';
    return rs_digest_parse(text, digest_p) == RS_OK;
}

rs_status_t rs__file_dir_geometry_put(rs_dir_h dir, rs__dir_request_t *req,
                                      rs_diag_t *diag)
{
    char gdir[PATH_MAX], path[PATH_MAX], name[RS_FDIR_NAME_LEN];
    uint64_t have = 0;
    rs_status_t st = geometry_path(dir, req, req->doc != NULL, diag, gdir,
                                   path);
    if (st != RS_OK)
        return st;
    if (stored_digest(path, &have) && have == req->generation) {
        req->swapped = 0;
        return RS_OK;
    }
    if (req->doc == NULL) {
        req->swapped = -1;
        return RS_OK;
    }
    char *data = malloc(STAMP_LEN + req->doc_len + 1);
    if (data == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    rs_digest_format(req->generation, data);
    data[STAMP_LEN - 1] = '\n';
    memcpy(data + STAMP_LEN, req->doc, req->doc_len);
    rs__file_dir_entry_name(req->slot, req->publisher, name);
    st = rs__file_dir_replace(gdir, name, data, STAMP_LEN + req->doc_len,
                              diag);
    free(data);
    req->swapped = st == RS_OK;
    return st;
}

rs_status_t rs__file_dir_geometry_get(rs_dir_h dir, rs__dir_request_t *req,
                                      rs_diag_t *diag)
{
    char gdir[PATH_MAX], path[PATH_MAX], *data = NULL;
    size_t len = 0;
    int absent = 0;
    rs_status_t st = geometry_path(dir, req, 0, diag, gdir, path);
    if (st == RS_OK)
        st = rs__file_dir_read(path, RS_DIR_TABLE_MAX + STAMP_LEN, diag,
                               &absent, &data, &len);
    req->record = NULL;
    if (st != RS_OK || absent)
        return st;
    char text[STAMP_LEN];
    int ok = len >= STAMP_LEN && data[STAMP_LEN - 1] == '\n';
    if (ok) {
        memcpy(text, data, STAMP_LEN - 1);
        text[STAMP_LEN - 1] = '\0';
        ok = rs_digest_parse(text, &req->generation) == RS_OK;
    }
    if (!ok) {
        free(data);
        return rs__diag_set(diag, RS_ERR_VERIFY, "%s: the geometry document "
                            "has no digest line (\"rsd64:<16 hex>\"); "
                            "refusing it before parsing", path);
    }
    memmove(data, data + STAMP_LEN, len - STAMP_LEN);
    data[len - STAMP_LEN] = '\0';
    req->record = data;
    req->record_len = len - STAMP_LEN;
    return RS_OK;
}
