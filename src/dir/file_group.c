/* Group records in the file:DIR backend: the file group-<name> in the
 * version's directory, compared and replaced under the version lock
 * (dir_group.c owns the record's format and meaning). Group records stay
 * after a release: ranks may still be reading their decision. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/file_impl.h"

#define GROUP_PREFIX "group-"
/* A record holds at most a few kilobytes (dir_group.c's limits). */
#define GROUP_RECORD_MAX ((size_t)64 << 10)

static rs_status_t swap(const char *vdir, rs__dir_request_t *req, rs_diag_t *diag)
{
    char name[PATH_MAX], path[PATH_MAX];
    char *cur = NULL;
    size_t len = 0;
    int absent = 0;
    snprintf(name, sizeof(name), GROUP_PREFIX "%s", req->group);
    rs__file_dir_join(vdir, name, path);
    rs_status_t st = rs__file_dir_read(path, GROUP_RECORD_MAX, diag, &absent,
                                   &cur, &len);
    if (st != RS_OK)
        return st;
    int same = absent ? req->expect == NULL
                      : req->expect != NULL && strcmp(cur, req->expect) == 0;
    if (req->table != NULL && same) {
        st = rs__file_dir_replace(vdir, name, req->table, req->len, diag);
        free(cur);
        cur = NULL;
        if (st != RS_OK)
            return st;
        cur = strdup(req->table);
        if (cur == NULL)
            return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
        req->swapped = 1;
    }
    req->record = cur; /* NULL when absent and not written */
    return RS_OK;
}

rs_status_t rs__file_dir_group(rs_dir_h dir, rs__dir_request_t *req, rs_diag_t *diag)
{
    return rs__file_dir_locked(dir, req, 0, diag, swap);
}
