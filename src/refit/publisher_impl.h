/* The publisher's internal state and the functions its files share
 * (publisher.c and publisher_*.c): registered shards, staging (arena, cut
 * pieces, quantized pieces), the cuts records it caches, its table. */
#ifndef RS_REFIT_PUBLISHER_IMPL_H
#define RS_REFIT_PUBLISHER_IMPL_H

#include <pthread.h>

#include "core/strmap.h"
#include "core/vec.h"
#include "reshard/dir.h"
#include "reshard/expose.h"
#include "reshard/quant.h"
#include "reshard/refit.h"
#include "reshard/sources.h"
#include "reshard/transport.h"

typedef struct rs__publish_shard {
    char *tensor;
    rs_dtype_t dtype;
    int ndim;
    int64_t full_shape[RS_MAX_DIMS];
    int64_t offset[RS_MAX_DIMS];
    int64_t shape[RS_MAX_DIMS];
    void *ptr;       /* the caller's bytes */
    uint64_t nbytes;
    void *served;    /* where the served bytes are: ptr, or its arena slot */
    size_t same_prev; /* 1 + the index of the shard of this tensor
                       * registered before it, 0 for none
                       * (publisher_shard_index.c) */
} rs__publish_shard_t;

/* Each served slot of the arena starts a fresh cache line. */
#define RS_PUB_SLOT_ALIGN 64

/* The arena bytes a slot of n bytes takes, up to the next slot. */
static inline uint64_t rs__publisher_slot(uint64_t n)
{
    return (n + RS_PUB_SLOT_ALIGN - 1) / RS_PUB_SLOT_ALIGN * RS_PUB_SLOT_ALIGN;
}

/* Makes the vector next_<name> of publisher `p` its <name> (what is
 * served) and empties next_<name>, keeping both buffers for the next
 * staging. */
#define RS_PUB_VEC_SWAP(p, name)                                              \
    do {                                                                      \
        void *swap_v_ = (p)->name;                                            \
        size_t swap_cap_ = (p)->name##_cap;                                   \
        (p)->name = (p)->next_##name;                                         \
        (p)->name##_len = (p)->next_##name##_len;                             \
        (p)->name##_cap = (p)->next_##name##_cap;                             \
        (p)->next_##name = swap_v_;                                           \
        (p)->next_##name##_len = 0;                                           \
        (p)->next_##name##_cap = swap_cap_;                                   \
    } while (0)

/* One served sub-box of a shard (cut-aligned staging,
 * publisher_arena_cuts.c). */
typedef struct rs__publish_piece {
    size_t shard;                /* index into the publisher's shards */
    int64_t offset[RS_MAX_DIMS]; /* in the full tensor */
    int64_t shape[RS_MAX_DIMS];
    uint64_t nbytes;
    void *served;                /* its arena slot */
} rs__publish_piece_t;

/* The longest canonical spec text (rs_quant_spec_format) a publisher
 * serves, with its NUL. */
#define RS_PUB_SPEC_MAX 96

/* One "GLOB=SPEC" entry of params.quantize, parsed at create
 * (publisher_quant_rules.c): the glob, the spec parsed and in canonical
 * text. */
typedef struct rs__publish_quant_rule {
    char *glob;
    char spec[RS_PUB_SPEC_MAX];
    char *entry;               /* the entry as given, for notices */
} rs__publish_quant_rule_t;

/* One quantized piece the arena serves (publisher_arena_quant.c): under one
 * spec, the FP8 values of the whole blocks inside one shard, as a sub-box of
 * "<src>#<spec>", and their scales, as a sub-box of "<src>#<spec>#scale" (the
 * block grid). */
typedef struct rs__publish_quant_piece {
    size_t shard;                    /* index into the publisher's shards */
    char spec[RS_PUB_SPEC_MAX];      /* canonical text */
    rs_quant_scheme_t scheme;
    rs_dtype_t format;
    int qblock_ndim;                 /* the spec's block, as parsed */
    int64_t qblock[RS_MAX_DIMS];
    int64_t block[RS_MAX_DIMS];      /* block extent per dim of the tensor */
    int64_t grid[RS_MAX_DIMS];       /* blocks per dim: the scales' shape */
    int64_t lo[RS_MAX_DIMS], len[RS_MAX_DIMS];   /* elements */
    int64_t glo[RS_MAX_DIMS], glen[RS_MAX_DIMS]; /* blocks */
    uint64_t nbytes, scale_nbytes;
    void *served, *scale_served;     /* arena slots */
} rs__publish_quant_piece_t;

/* A cuts record told as unusable, by holder and bytes: told once while it
 * stays the same. */
typedef struct rs__publish_told {
    char holder[RS_DIR_NAME_MAX + 1];
    uint64_t digest;
} rs__publish_told_t;

/* A receiver's cuts record as the publisher last read it
 * (publisher_cut_records.c): its generation and its cuts on the registered
 * tensors; cuts NULL when it cannot be used (`why`, told when the union is
 * built, in holder order) or was never read (read 0: a read failed). */
typedef struct rs__publish_record {
    char holder[RS_DIR_NAME_MAX + 1];
    uint64_t generation;
    rs_cuts_h cuts;
    char *why;
    int read;
} rs__publish_record_t;

/* The most versions whose deltas a publisher keeps (delta_keep). */
#define RS_PUB_DELTA_KEEP_MAX 16

/* One served entry's delta in a ring slot (publisher_delta.c): base -1
 * when the entry has none in that version (capped, or no base). */
typedef struct rs__publish_delta {
    int64_t base;
    uint64_t nbytes;       /* the entry's bytes */
    uint64_t off, len;     /* in the slot's memory */
    uint32_t esize, chunk; /* the header's, repeated in the table */
    uint64_t digest;       /* rsd64 of the delta's len bytes */
} rs__publish_delta_t;

/* One kept version's deltas: memory of its own (served beside the arena),
 * the version and the served layout they were made for, one delta per
 * served entry (shard, or piece in cut-aligned staging). */
typedef struct rs__publish_ring {
    void *mem;
    uint64_t cap;
    int64_t version;       /* -1: holds none */
    uint64_t layout;
    rs__publish_delta_t *d;
    size_t n, d_cap;
} rs__publish_ring_t;

/* An encoding in progress over the arena copy (publisher_delta.c). */
struct rs__delta_enc;

struct rs_publisher {
    rs_publisher_params_t params; /* string fields below are owned copies */
    char *model, *backend, *session;
    rs_dir_h dir, hb_dir;
    rs_exposer_h exposer;         /* made once, reset to re-expose */
    int exposed;                  /* the exposer serves the shards */
    int dirty;                    /* registrations changed since exposing */
    /* Copy-in staging (RS_STAGING_ARENA, publisher_arena.c): the arena and how
     * much of it the shards use, the version it holds (-1: none) and the last
     * version seen released. */
    void *arena;
    uint64_t arena_cap, arena_len;
    int64_t arena_version, released;
    int fallback_told;            /* the fallback notice was given */
    /* Cut-aligned staging (publisher_arena_cuts.c): on when cut_aligned, cuts
     * or cuts_file is set; the cuts read from cuts_file; the sub-boxes of the
     * arena's version (the table lists them, in shard order) and those of the
     * staging being prepared; records told unusable. */
    int cut_mode;
    char *cuts_file;
    rs_cuts_h file_cuts;
    RS_VEC(rs__publish_piece_t, pieces);
    RS_VEC(rs__publish_piece_t, next_pieces);
    RS_VEC(rs__publish_told_t, told);
    /* The directory's cuts records as last read (in holder order), and
     * the union of every source of cuts built from them, valid while no
     * record changed (records_changed 0) and the registered tensors are
     * those digested in cut_key; records parsed since create (tests). */
    RS_VEC(rs__publish_record_t, records);
    int records_changed;
    rs_cuts_h cut_union;
    uint64_t cut_key;
    uint64_t records_parsed;
    /* Publisher-side quantization (publisher_quant_rules.c,
     * publisher_arena_quant.c): the parsed params.quantize entries; the
     * quantized pieces of the arena's version (the table lists them after the
     * shards) and of the staging being prepared; the buffer a shard's
     * whole-block box is gathered into when it is not the whole shard; the
     * tensor key the records were read for when only quantize_wanted reads
     * them. */
    RS_VEC(rs__publish_quant_rule_t, qrules);
    RS_VEC(rs__publish_quant_piece_t, qpieces);
    RS_VEC(rs__publish_quant_piece_t, next_qpieces);
    void *qscratch;
    uint64_t qscratch_cap;
    uint64_t qrecord_key;
    RS_VEC(rs__publish_shard_t, shards);
    /* Each tensor's last registered shard (1 + its index), the others
     * chained by same_prev; rebuilt before the next registration once
     * an unregister moved shards (by_name_stale). */
    rs__strmap_t by_name;
    int by_name_stale;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t hb_thread;
    int hb_running, hb_stop;
    int64_t version;              /* heartbeat target */
    RS_VEC(int64_t, published);   /* every version published, in order */
    char *table;                  /* its published table, for republishing */
    size_t table_len;
    uint64_t table_geometry;      /* its geometry key (publisher_table.c) */
    size_t num_served;            /* its entries (rs_publisher_num_served) */
    /* Deltas (publisher_delta.c): params.delta_keep ring slots, the layout
     * key of what the arena holds (valid with arena_version >= 0), the
     * slot being written by this staging (NULL: plain copies). */
    rs__publish_ring_t *ring;
    size_t nring;
    uint64_t arena_layout;
    rs__publish_ring_t *filling;
    int64_t filling_base, filling_version;
    /* raised by rs_publisher_cancel from any thread: stops the waits of
     * the main directory handle (rs_publisher_wait_released) */
    rs_cancel_t cancel;
};

/* Stops and joins the heartbeat thread; a no-op when none runs. The next
 * rs_publisher_publish starts it again. */
void rs__publisher_stop_heartbeat(rs_publisher_h p);

/* Where this publisher's notices go: the caller's callback or stderr. */
void rs__publisher_notify(rs_publisher_h p, const char *msg);

/* "publisher rank <R> replica <K> (<session>)", for notices: replicas of
 * a rank share its number. Returns buf. */
#define RS_PUBLISHER_WHO_MAX (RS_DIR_NAME_MAX + 80)
const char *rs__publisher_who(rs_publisher_h p, char *buf, size_t cap);

/* Replaces the region *mem_p (NULL: none) by one of `need` bytes from the
 * exposer (*cap_p its size); the exposer is reset, so everything is
 * exposed again at the next publish (publisher_arena.c). */
rs_status_t rs__publisher_replace_region(rs_publisher_h p, void **mem_p,
                                         uint64_t *cap_p, uint64_t need,
                                         const char *what, rs_diag_t *diag);

/* The publisher's exposer, created on first use (publisher_arena.c). */
rs_status_t rs__publisher_exposer(rs_publisher_h p, rs_diag_t *diag);

/* RS_ERR_INVALID_ARG unless [ptr, +nbytes) lies in one allocation of the
 * publisher (staging in_place registers only such memory). */
rs_status_t rs__publisher_check_in_place(rs_publisher_h p, const char *tensor,
                                         const void *ptr, uint64_t nbytes,
                                         rs_diag_t *diag);

/* The registered shards by tensor (publisher_shard_index.c). Check refuses,
 * with RS_ERR_INVALID_ARG naming the tensor and both boxes, a shard `s` that
 * shares an element with a registered shard of its tensor (a receiver would get
 * the bytes of one of them) or has another number of dims; add indexes the
 * shard just appended (0 on exhaustion). O(registered shards of the tensor),
 * after an unregister once O(registered shards). */
rs_status_t rs__publisher_check_overlap(rs_publisher_h p,
                                        const rs__publish_shard_t *s,
                                        rs_diag_t *diag);
int rs__publisher_index_add(rs_publisher_h p, size_t i);

/* Makes every shard's served bytes those of `version`: in arena staging,
 * lays the shards out in the arena (growing it, which sets p->dirty) and
 * copies them in, refused while the arena's previous version is not
 * released; otherwise served = ptr. O(bytes) for arenas. */
rs_status_t rs__publisher_stage(rs_publisher_h p, int64_t version,
                                rs_diag_t *diag);

/* Cut-aligned staging (publisher_arena_cuts.c). Reads p->cuts_file into
 * p->file_cuts (at create; RS_ERR_INPUT naming the file and field). */
rs_status_t rs__publisher_load_cuts_file(rs_publisher_h p, rs_diag_t *diag);

/* Splits every non-empty shard at the cuts of this staging (the records,
 * params.cuts, file_cuts) into p->next_pieces (p->pieces, the served
 * version's, untouched); returns the arena bytes they need (each piece at
 * a RS_PUB_SLOT_ALIGN boundary) in *need_p. RS_ERR_INPUT when params.cuts
 * or cuts_file disagree with a registered tensor's shape or the model.
 * O(holders + bytes of the records that changed + pieces); the union is
 * rebuilt only when a record or the registered tensors changed, or
 * params.cuts is set (the caller may change it between stagings). */
rs_status_t rs__publisher_cut(rs_publisher_h p, rs_diag_t *diag,
                              uint64_t *need_p);

/* The cuts records (publisher_cut_records.c). Sync brings p->records up to date
 * with the directory's generations, reading and parsing only new or
 * changed records and setting records_changed when anything changed; a
 * directory that cannot be read is told and the records read before are
 * kept. Only RS_ERR_NO_MEMORY is an error. O(holders + changed records'
 * bytes). */
rs_status_t rs__publisher_sync_records(rs_publisher_h p, rs_diag_t *diag);
/* Merges every usable cached record into `into`, telling (once per
 * holder and generation) each that the merge refuses. */
rs_status_t rs__publisher_merge_records(rs_publisher_h p, rs_cuts_h into,
                                        rs_diag_t *diag);
/* Drops every cached record (the registered tensors changed, or
 * destroy). */
void rs__publisher_forget_records(rs_publisher_h p);
/* Tells through the notice callback, once per (holder, generation), why
 * a record is left out. */
void rs__publisher_tell_record(rs_publisher_h p, const char *holder,
                               uint64_t generation, const char *why);

/* A digest of each registered tensor's name and full shape: the records
 * hold only the registered tensors, so they are read again when it
 * changes (publisher_arena_cuts.c). */
uint64_t rs__publisher_tensor_key(rs_publisher_h p);

/* Copies the sub-box `piece` of shard s into dst, row-major (a strided
 * copy, publisher_arena_cuts.c); with an encoder (not NULL) every run goes
 * through it (rs__delta_enc_copy), which writes it at dst in turn. */
void rs__publisher_copy_box(const rs__publish_shard_t *s,
                            const rs__publish_piece_t *piece, char *dst,
                            struct rs__delta_enc *enc);

/* ---- deltas (publisher_delta.c) ----
 * Before an arena staging's copies: the layout key of the entries about
 * to be served (shards, or p->next_pieces in cut-aligned staging); then
 * begin, which picks the ring slot this version's deltas go into when the
 * arena holds `prev` in that same layout (sized for the entries; may
 * reset the exposer as growing the arena does) and forgets every kept
 * delta of another layout. Each entry is then copied with
 * rs__publisher_delta_copy (or, for a strided piece, through the encoder
 * rs__publisher_delta_enc gives); end marks the slot as `version`'s. */
uint64_t rs__publisher_layout_key(rs_publisher_h p);
rs_status_t rs__publisher_delta_begin(rs_publisher_h p, int64_t prev,
                                      int64_t version, uint64_t layout,
                                      rs_diag_t *diag);
/* Copies entry i (nbytes at dst, from src) with its delta when a slot is
 * filling, else memcpy. rs__publisher_delta_filling: 1 when this staging
 * writes deltas (a quantized piece is then quantized aside and copied in
 * through the encoder). */
int rs__publisher_delta_filling(rs_publisher_h p);
void rs__publisher_delta_copy(rs_publisher_h p, size_t i, void *dst,
                              const void *src, uint64_t nbytes);
/* For a strided copy: starts entry i's encoding into *enc and returns 1,
 * or 0 (copy plainly); rs__publisher_delta_done ends it. */
int rs__publisher_delta_enc(rs_publisher_h p, size_t i, void *dst,
                            struct rs__delta_enc *enc);
void rs__publisher_delta_done(rs_publisher_h p, size_t i,
                              struct rs__delta_enc *enc);
void rs__publisher_delta_end(rs_publisher_h p, int64_t version, int ok);
/* The "deltas" fragment of entry i's table entry (", \"deltas\": [...]"),
 * into buf; "" when deltas are off. */
rs_status_t rs__publisher_delta_json(rs_publisher_h p, size_t i,
                                     char **buf_p, size_t *len_p);
rs_status_t rs__publisher_delta_regions(rs_publisher_h p, rs_diag_t *diag);
/* The entry index of quantized piece `piece`'s values (scale 0) or scales
 * (scale 1): after the shards' (or cut pieces') entries, two per piece;
 * of the served layout once the staging swapped it in, of the next one
 * while it fills. */
size_t rs__publisher_quant_entry(rs_publisher_h p, size_t piece, int scale);
void rs__publisher_free_deltas(rs_publisher_h p);


/* Publisher-side quantization. Parses the caller's quantize entries into
 * p->qrules (at create): RS_ERR_INVALID_ARG naming the entry (by index and
 * text) when it has no '=', an empty glob, or a spec that does not
 * parse. */
rs_status_t rs__publisher_load_quant_rules(rs_publisher_h p,
                                           const rs_publisher_params_t *pp,
                                           rs_diag_t *diag);
void rs__publisher_free_quant(rs_publisher_h p);

/* Calls fn(ctx, spec) for each canonical spec shard i is quantized with (a spec
 * named twice is given twice): the rules whose glob matches its tensor, and
 * with quantize_wanted every cached record's request for it
 * (publisher_quant_rules.c). A non-RS_OK return stops and is returned. */
typedef rs_status_t (*rs__publisher_spec_fn)(void *ctx, const char *spec);
rs_status_t rs__publisher_specs_of(rs_publisher_h p, size_t shard,
                                   rs__publisher_spec_fn fn, void *ctx);

/* Plans this staging's quantized pieces into p->next_qpieces (reading the cuts
 * records first when only quantize_wanted needs them) and returns the arena
 * bytes they take in *need_p (each part at a RS_PUB_SLOT_ALIGN boundary). Only
 * RS_ERR_NO_MEMORY is an error; a tensor that cannot take a spec (its dtype,
 * its rank) is told once and left out (publisher_arena_quant.c). */
rs_status_t rs__publisher_quant_plan(rs_publisher_h p, rs_diag_t *diag,
                                     uint64_t *need_p);

/* Lays p->next_qpieces out from `base`, quantizes each from its live
 * shard (rs_quant_box) and makes them p->qpieces. RS_ERR_INPUT naming the
 * tensor, spec and block of a non-finite value (p->qpieces untouched then);
 * RS_ERR_NO_MEMORY. O(bytes quantized). */
rs_status_t rs__publisher_quant_fill(rs_publisher_h p, void *base,
                                     int64_t version, rs_diag_t *diag);

/* Lays p->next_pieces out from `base`, copies each sub-box out of its
 * shard (a strided copy) and makes them p->pieces. O(bytes). */
void rs__publisher_fill_pieces(rs_publisher_h p, void *base);

/* Adds the served memory to the (reset) exposer: the arena as one region,
 * or each non-empty shard at its own address. */
rs_status_t rs__publisher_add_regions(rs_publisher_h p, rs_diag_t *diag);

/* `table` split for the directory (publisher_split.c): the geometry
 * document (the values a version changes, digests and step, cut out) and
 * the insertion lines that put them back (dir/split.h). The caller frees
 * both. */
rs_status_t rs__publisher_split(const char *table, size_t len, char **doc_p,
                                size_t *doc_len_p, char **ins_p,
                                size_t *ins_len_p, rs_diag_t *diag);

/* This rank's mx.reshard.shard_table.v1 for a version (caller frees;
 * publisher_table.c). */
rs_status_t rs__publisher_table(rs_publisher_h p, int64_t version,
                                char **json_p, size_t *len_p, rs_diag_t *diag);

/* The key of this publisher's shard geometry for its directory slot
 * (publisher_table.c): tensor names, dtypes, full shapes, offsets and
 * shapes of its non-empty shards, in any registration order. O(shards). */
uint64_t rs__publisher_geometry(rs_publisher_h p);

#endif
