/* Slot records of the file:DIR backend: `slot-<i>` holds the slot's
 * geometry key and the names of its publishers in joining order,
 * "<16 hex> <publisher> <publisher> ...\n". A record is replaced only under
 * the version lock and only after the entry it adds is in place, so a
 * reader that finds a name in a record finds its entry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "dir/file_impl.h"

#define RECORD_MAX (17 + RS_DIR_PUBLISHERS_MAX * (RS_DIR_NAME_MAX + 1) + 2)

/* One publisher name at *p, ending at ' ' or '\n'; names become file
 * names, so only the directory's own alphabet is taken. */
static int parse_name(const char **p, char out[RS_DIR_NAME_MAX + 1])
{
    size_t n = 0;
    while (rs__dir_name_char((*p)[n]) && n <= RS_DIR_NAME_MAX)
        n++;
    if (n == 0 || n > RS_DIR_NAME_MAX || ((*p)[n] != ' ' && (*p)[n] != '\n'))
        return 0;
    memcpy(out, *p, n);
    out[n] = '\0';
    *p += n;
    return strcmp(out, ".") != 0 && strcmp(out, "..") != 0;
}

static int parse_record(const char *text, size_t len, rs__file_dir_slot_t *rec)
{
    if (len < 18 || strlen(text) != len || text[len - 1] != '\n')
        return 0;
    for (int i = 0; i < 16; i++)
        if (!((text[i] >= '0' && text[i] <= '9') ||
              (text[i] >= 'a' && text[i] <= 'f')))
            return 0;
    memcpy(rec->geometry, text, 16);
    rec->geometry[16] = '\0';
    const char *p = text + 16;
    rec->n = 0;
    while (*p == ' ') {
        p++;
        if (rec->n == RS_DIR_PUBLISHERS_MAX || !parse_name(&p, rec->names[rec->n]))
            return 0;
        rec->n++;
    }
    return *p == '\n' && p[1] == '\0' && rec->n > 0;
}

rs_status_t rs__file_dir_slot_read(const char *vdir, int64_t slot,
                               rs_diag_t *diag, rs__file_dir_slot_t *rec)
{
    char name[RS_FDIR_NAME_LEN], path[PATH_MAX], *text = NULL;
    size_t len = 0;
    int absent;
    rs__file_dir_slot_name(slot, name);
    rs__file_dir_join(vdir, name, path);
    rec->present = 0;
    rec->n = 0;
    rs_status_t st = rs__file_dir_read(path, RECORD_MAX, diag, &absent, &text,
                                   &len);
    if (st != RS_OK || absent)
        return st;
    int ok = parse_record(text, len, rec);
    free(text);
    if (!ok)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s: expected a slot record "
                            "\"<16 hex digits> <publisher>...\" with 1 to %d "
                            "publishers", path, RS_DIR_PUBLISHERS_MAX);
    rec->present = 1;
    return RS_OK;
}

rs_status_t rs__file_dir_slot_write(const char *vdir, int64_t slot,
                                const rs__file_dir_slot_t *rec, rs_diag_t *diag)
{
    char name[RS_FDIR_NAME_LEN], text[RECORD_MAX];
    size_t used = (size_t)snprintf(text, sizeof(text), "%s", rec->geometry);
    for (size_t i = 0; i < rec->n; i++)
        used += (size_t)snprintf(text + used, sizeof(text) - used, " %s",
                                 rec->names[i]);
    used += (size_t)snprintf(text + used, sizeof(text) - used, "\n");
    rs__file_dir_slot_name(slot, name);
    return rs__file_dir_replace(vdir, name, text, used, diag);
}

int rs__file_dir_slot_find(const rs__file_dir_slot_t *rec, const char *publisher)
{
    for (size_t i = 0; i < rec->n; i++)
        if (strcmp(rec->names[i], publisher) == 0)
            return (int)i;
    return -1;
}
