/* Fuzz target for what a receiver reads from others: the file directory's
 * records (meta, slot tables, heartbeats, leases, markers) written as
 * fuzzed bytes into a version directory and read through rs_dir_*; a slot
 * table that reads back is loaded as shard tables like the receiver does,
 * and transport blobs (from the table's agent_meta_b64 and raw) are
 * decoded by rs__base64_decode and rs_transport_connect for cma and ucx.
 *
 * Input: a flags byte, then up to six pieces separated by 0x01 bytes:
 * meta, slot-0 table, hb-0, a lease file, base64 text, a raw blob. The
 * table is stored as publisher "default"'s entry with a true digest line
 * (flag 0x10: as raw bytes, no digest line), so it reaches the parser. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base64.h"
#include "reshard/digest.h"
#include "reshard/dir.h"
#include "reshard/expose.h"
#include "reshard/sources.h"
#include "reshard/transport.h"

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "fuzz_dir: %s:%d: %s\n", __FILE__, __LINE__,      \
                    #cond);                                                  \
            abort();                                                         \
        }                                                                    \
    } while (0)

#define NPIECES 6
enum { P_META, P_SLOT, P_HB, P_LEASE, P_B64, P_BLOB };

static char root[256], vdir[512];
static rs_dir_h dir;
static rs_transport_h cma, ucx;

/* Removes everything under the version directory (one level: the file
 * backend keeps no subdirectories there, but inputs may ask for one). */
static void clear_vdir(void)
{
    static const char *const names[] = {
        "meta", "slot-0", "slot-1", "slot-0@default", "slot-1@default",
        "hb-0@default", "hb-1@default", "lease-h",
        "READY", "RELEASED", "lock"};
    char path[600];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", vdir, names[i]);
        if (unlink(path) != 0 && errno == EISDIR)
            rmdir(path);
    }
}

static void remove_root(void)
{
    char path[600];
    rs_transport_destroy(ucx);
    rs_transport_destroy(cma);
    rs_dir_close(dir);
    clear_vdir();
    rmdir(vdir);
    snprintf(path, sizeof(path), "%s/m", root);
    rmdir(path);
    rmdir(root);
}

static void put(const char *name, const uint8_t *data, size_t len)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", vdir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    CHECK(len == 0 || write(fd, data, len) == (ssize_t)len);
    close(fd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    rs_diag_t diag;
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof(root), "%s/reshard-fuzz-dir-%ld",
             tmp != NULL ? tmp : "/tmp", (long)getpid());
    snprintf(vdir, sizeof(vdir), "%s/m/1", root);
    char url[300];
    snprintf(url, sizeof(url), "file:%s", root);
    CHECK(rs_dir_open(url, &diag, &dir) == RS_OK);
    CHECK(mkdir(root, 0755) == 0 || errno == EEXIST);
    snprintf(url, sizeof(url), "%s/m", root);
    CHECK(mkdir(url, 0755) == 0 || errno == EEXIST);
    CHECK(mkdir(vdir, 0755) == 0 || errno == EEXIST);
    atexit(remove_root);
    setenv("UCX_TLS", "self,sm", 0);
    rs_transport_params_t tp;
    rs_transport_params_init(&tp);
    tp.backend = "cma";
    CHECK(rs_transport_create(&tp, &diag, &cma) == RS_OK);
    tp.backend = "ucx";
    if (rs_transport_create(&tp, &diag, &ucx) != RS_OK) {
        fprintf(stderr, "fuzz_dir: no ucx transport (%s); ucx blobs are "
                "not fuzzed\n", diag.msg);
        ucx = NULL;
    }
    return 0;
}

/* ---- transport blobs ----------------------------------------------------- */

static int take(const uint8_t *b, size_t len, size_t *off, size_t n,
                uint64_t *v)
{
    if (n > len - *off)
        return 0;
    *v = 0;
    for (size_t i = n; i-- > 0;)
        *v = *v << 8 | b[*off + i];
    *off += n;
    return 1;
}

/* 1 when the bytes are a structurally complete ucx blob (docs/formats.md):
 * the decoder would then hand the worker address to UCX itself, whose
 * parser is not ours to fuzz. */
static int whole_ucx_blob(const uint8_t *b, size_t len)
{
    size_t off = 5;
    uint64_t alen, n, v, klen;
    if (len < 5 || memcmp(b, "RSB1", 4) != 0 || b[4] != 2 ||
        !take(b, len, &off, 4, &alen) || alen > len - off)
        return 0;
    off += alen;
    if (!take(b, len, &off, 4, &n))
        return 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!take(b, len, &off, 8, &v) || !take(b, len, &off, 8, &v) ||
            !take(b, len, &off, 8, &v) || !take(b, len, &off, 4, &klen) ||
            klen > len - off)
            return 0;
        off += klen;
    }
    return off == len;
}

static void connect_blob(const void *blob, size_t len)
{
    rs_peer_t peer = {"fuzz", 0, NULL, 0, blob, len};
    rs_diag_t diag;
    rs_diag_clear(&diag);
    /* cma only decodes and records: nothing is read from the pid */
    if (rs_transport_connect(cma, 0, &peer, &diag) != RS_OK)
        CHECK(diag.msg[0] != '\0');
    if (ucx != NULL && len > 0 && !whole_ucx_blob(blob, len)) {
        rs_diag_clear(&diag);
        CHECK(rs_transport_connect(ucx, 0, &peer, &diag) != RS_OK);
        CHECK(diag.msg[0] != '\0');
    }
}

static void decode_b64(const char *text)
{
    void *data = NULL;
    size_t len = 0;
    if (rs__base64_decode(text, &data, &len) != RS_OK)
        return;
    char *again = NULL;
    CHECK(rs__base64_encode(data, len, &again) == RS_OK);
    void *back = NULL;
    size_t blen = 0;
    CHECK(rs__base64_decode(again, &back, &blen) == RS_OK);
    CHECK(blen == len && memcmp(back, data, len) == 0);
    connect_blob(data, len);
    free(back);
    free(again);
    free(data);
}

/* ---- the directory ------------------------------------------------------- */

/* A table read back goes where the receiver sends it: the shard-table
 * loader, then each table's transport blob to the transports. */
static void use_table(const void *table, size_t len)
{
    rs_sources_h s = NULL;
    rs_diag_t diag;
    CHECK(rs_sources_create(&s) == RS_OK);
    if (rs_sources_load_string(s, table, len, "m version 1 slot 0", &diag) == RS_OK) {
        for (size_t i = 0; i < rs_sources_num_tables(s); i++) {
            rs_table_info_t t;
            rs_sources_table(s, i, &t);
            if (t.agent_meta_b64 != NULL)
                decode_b64(t.agent_meta_b64);
        }
    }
    rs_sources_destroy(s);
}

static void expect_clean(rs_status_t st, const rs_diag_t *diag)
{
    if (st != RS_OK)
        CHECK(diag->msg[0] != '\0');
}

/* Slot k's record and entry for publisher "default" holding the table. */
static void put_slot(int k, int raw, const uint8_t *table, size_t len)
{
    char name[64], digest[RS_DIGEST_STR_LEN + 1], head[64];
    uint64_t key = rs_digest(table, len); /* as rs_dir_publish keys it */
    int n = snprintf(head, sizeof(head), "%016llx default\n",
                     (unsigned long long)key);
    snprintf(name, sizeof(name), "slot-%d", k);
    put(name, (const uint8_t *)head, (size_t)n);
    uint8_t *entry = malloc(len + 64);
    CHECK(entry != NULL);
    rs_digest_format(rs_digest(table, len), digest);
    n = raw ? 0 : snprintf((char *)entry, 64, "%s %016llx\n", digest,
                           (unsigned long long)key);
    if (len > 0)
        memcpy(entry + n, table, len);
    snprintf(name, sizeof(name), "slot-%d@default", k);
    put(name, entry, (size_t)n + len);
    free(entry);
}

static void exercise_dir(uint8_t flags, const uint8_t *slot, size_t slot_len)
{
    rs_diag_t diag;
    rs_version_info_t info, *infos = NULL;
    size_t count = 0;
    rs_diag_clear(&diag);
    expect_clean(rs_dir_info(dir, "m", 1, &diag, &info), &diag);
    rs_diag_clear(&diag);
    if (rs_dir_list(dir, "m", &diag, &infos, &count) == RS_OK)
        free(infos);
    else
        CHECK(diag.msg[0] != '\0');
    rs_diag_clear(&diag);
    expect_clean(rs_dir_wait_ready(dir, "m", (flags & 0x20) ? -1 : 1, 0, 5,
                                   &diag, &info), &diag);
    for (int64_t k = 0; k < 2; k++) {
        void *table = NULL;
        size_t len = 0;
        rs_diag_clear(&diag);
        rs_status_t st = rs_dir_read(dir, "m", 1, k, &diag, &table, &len);
        expect_clean(st, &diag);
        if (st == RS_OK) {
            use_table(table, len);
            free(table);
        }
    }
    if (flags & 0x40) { /* a publisher replaying slot 0 over what is there */
        rs_diag_clear(&diag);
        expect_clean(rs_dir_publish(dir, "m", 1, 0, slot, slot_len, &diag), &diag);
    }
    if (flags & 0x80) { /* leases are read to decide a release */
        rs_diag_clear(&diag);
        expect_clean(rs_dir_release(dir, "m", 1, &diag), &diag);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *piece[NPIECES] = {0};
    size_t plen[NPIECES] = {0};
    uint8_t flags = size > 0 ? data[0] : 0;
    size_t at = size > 0 ? 1 : 0;
    for (int i = 0; i < NPIECES; i++) {
        const uint8_t *end = at < size ? memchr(data + at, 1, size - at) : NULL;
        size_t stop = end != NULL ? (size_t)(end - data) : size;
        piece[i] = data + at;
        plen[i] = stop - at;
        at = stop < size ? stop + 1 : size;
    }
    clear_vdir();
    put("meta", piece[P_META], plen[P_META]);
    put_slot(0, flags & 0x10, piece[P_SLOT], plen[P_SLOT]);
    if (flags & 0x04)
        put_slot(1, flags & 0x10, piece[P_SLOT], plen[P_SLOT]);
    put("hb-0@default", piece[P_HB], plen[P_HB]);
    put("lease-h", piece[P_LEASE], plen[P_LEASE]);
    if (flags & 0x01)
        put("READY", NULL, 0);
    if (flags & 0x02)
        put("RELEASED", NULL, 0);
    if (flags & 0x08) { /* a record that is a directory, not a file */
        char path[600];
        snprintf(path, sizeof(path), "%s/hb-1@default", vdir);
        mkdir(path, 0755);
    }
    exercise_dir(flags, piece[P_SLOT], plen[P_SLOT]);

    char *text = malloc(plen[P_B64] + 1);
    CHECK(text != NULL);
    memcpy(text, piece[P_B64], plen[P_B64]);
    text[plen[P_B64]] = '\0';
    decode_b64(text);
    free(text);
    connect_blob(piece[P_BLOB], plen[P_BLOB]);
    return 0;
}
