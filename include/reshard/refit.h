/* Refit lifecycles over a directory and a transport. A publisher (one per
 * trainer rank) registers the shards it owns, exposes them for one-sided
 * reads and publishes its table for each version; a receiver (one per
 * inference rank) discovers a READY version, plans its capture against every
 * table of that version, pulls, verifies and installs, in one call or as a
 * stage (everything but install, the bound parameters untouched) and a
 * later apply at a safe point. Plans, connections
 * and prepared descriptors are cached while the topology (every publisher's
 * identity, shard geometry, addresses and keys) stays the same, and rebuilt
 * automatically when it changes.
 *
 * Threads: a publisher or a receiver is used by one thread at a time: no
 * two calls on the same handle may overlap, except rs_receiver_cancel,
 * rs_publisher_cancel and their _clear, which any thread (or a signal
 * handler) may call while another call runs. Consecutive calls may come
 * from different threads when the caller orders them (a mutex, a join):
 * a version staged on a background thread may be applied or discarded on
 * another. The bound parameters are not touched by rs_receiver_stage, so
 * other threads may use them while it runs; rs_receiver_apply (and pull)
 * write them. Each handle runs one thread of its own on a second
 * directory connection: the publisher's heartbeat (started by publish,
 * stopped by unregister and destroy), and, while a version is being
 * pulled or is staged, the receiver's lease renewal; with ucx the
 * publisher's exposer runs a progress thread too. The notice callbacks may
 * be called from those threads as well as from the caller's, so they must
 * be safe to call from any thread. The install callback runs on the thread
 * calling rs_receiver_apply (or rs_receiver_pull). Publishers and receivers
 * on different threads share nothing and may run at once
 * (tests/integration/test_lease.c runs them beside directory handles on
 * other threads). */
#ifndef RESHARD_REFIT_H
#define RESHARD_REFIT_H

#include <stddef.h>
#include <stdint.h>
#include "reshard/capture.h"
#include "reshard/cuts.h"
#include "reshard/dir.h"
#include "reshard/exec.h"
#include "reshard/memory.h"
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rs_publisher *rs_publisher_h;
typedef struct rs_receiver *rs_receiver_h;

/* Where a publisher's served bytes live (rs_publisher_params_t.staging;
 * docs/refit.md, "Publisher staging"). */
typedef enum rs_staging {
    /* Registered caller memory, served where it is (the default). A
     * version's bytes must stay as published until it is released. With
     * ucx on one machine, reads of memory that is only registered are
     * emulated by UCX (answered by the exposer's progress thread); shards
     * that lie in rs_publisher_alloc memory are served one-sided. */
    RS_STAGING_CALLER = 0,
    /* Like CALLER, but every registered shard must lie in memory from
     * rs_publisher_alloc (refused otherwise), so every read is one-sided
     * where the memory allows: no copy, the fastest reads. */
    RS_STAGING_IN_PLACE = 1,
    /* Copy-in: each publish of a new version copies every registered
     * shard into an arena the publisher allocates (rs_publisher_alloc's
     * memory) and serves the arena: table addresses are arena addresses,
     * digests are over the arena's bytes, and the trainer may change its
     * tensors as soon as publish returns. One arena, so publishing a new
     * version while the previous one is not released is refused (see
     * rs_publisher_publish). */
    RS_STAGING_ARENA = 2,
} rs_staging_t;

typedef struct rs_publisher_params {
    size_t size; /* the caller's sizeof, set by rs_publisher_params_init */
    const char *directory;  /* "file:DIR" or "redis://host:port" */
    const char *model;
    int64_t rank, world;    /* this trainer's slot and the slot count */
    /* exposer backend: "ucx" (default) or "cma"; any other name
     * (unknown, or local and local-mt, which serve no other process) is
     * refused by rs_publisher_create with RS_ERR_INVALID_ARG naming it */
    const char *backend;
    /* Agent name, also this publisher's name in its directory slot;
     * default "trainer-<rank>" (replica 0) or "trainer-<rank>-r<replica>".
     * Publishers of one slot need distinct names: a publish under a name
     * already in the slot replaces that publisher's entry (a restarted
     * rank). */
    const char *session;
    /* Data-parallel replica index of this rank (default 0): replicas of a
     * rank publish to the same slot with identical shard geometry, and a
     * receiver reads each slot from one of them, failing over to another
     * when a read fails. */
    int64_t replica;
    int digests;            /* publish an rsd64 digest per shard */
    double heartbeat_s;     /* heartbeat period; default 1 s, <= 0 none */
    /* Directory outages while serving: a failed heartbeat is retried with
     * capped exponential backoff (heartbeat_s doubling up to
     * heartbeat_max_s, default 4 s) while the exposed memory keeps being
     * served; one notice when the outage begins, one when it ends. NULL
     * notice: stderr. */
    double heartbeat_max_s;
    /* Publishing while the directory is unreachable (also at create: the
     * server is connected on first use) is retried this long (default
     * 60 s) before rs_publisher_publish fails. */
    double publish_retry_s;
    rs_dir_notice_cb notice;
    void *notice_ctx;
    /* rs_staging_t; default RS_STAGING_CALLER. Others are refused by
     * rs_publisher_create (RS_ERR_INVALID_ARG). */
    int staging;
    /* Cut-aligned publishing (docs/cut-aligned.md),
     * on top of RS_STAGING_ARENA: each new version's shards are copied
     * into the arena as the sub-boxes between the cuts that fall inside
     * them (rs_cuts_split, one strided copy of each shard) and published
     * as those sub-boxes (arena addresses, a digest over each), so every
     * receiver's box of a shard is a few whole sub-boxes, each one
     * contiguous run. The cuts are the union of: with cut_aligned = 1,
     * every cuts record of the model in the directory, brought up to date
     * before staging each new version (rs_dir_list_cuts, then only the
     * records whose generation changed are read and parsed: a version with
     * no record changed reads none); `cuts`, a set the caller owns
     * and keeps alive (read at each staging, not changed by it); and
     * `cuts_file`, a reshard.cuts.v1 file read once by
     * rs_publisher_create. A record that cannot be used (unparsable, above
     * the size cap, another model, a shape that differs from a registered
     * tensor's) is told through `notice` once, naming its holder, and left
     * out, and read again only when it changes; a directory that cannot
     * be read is told and the version staged with the records read before
     * (and the other cuts). With no cut at all the arena holds whole shards,
     * as RS_STAGING_ARENA does. Any of the three with another staging is
     * refused by rs_publisher_create (RS_ERR_INVALID_ARG naming both). The
     * slot's geometry key stays that of the registered shards, so replicas
     * of a rank that saw different records (a receiver announced between
     * their publishes) still share the slot; a receiver plans against the
     * table of the replica it reads, and again after a failover. */
    int cut_aligned;
    rs_cuts_h cuts;
    const char *cuts_file;
    /* Publisher-side quantization (docs/quantized-refit.md, "Publisher-side
     * quantization"), on top of RS_STAGING_ARENA: each new version also
     * serves, for a tensor T and a spec S (reshard/quant.h), the FP8
     * tensor "T#S" (dtype the format, T's full shape) and its scales
     * "T#S#scale" (float32, shape the block grid), in the same table and
     * version as T, with digests. Each registered shard of T serves the
     * sub-box of the blocks that lie wholly inside it (a ragged last block
     * counts when the shard reaches the tensor's end) and the matching box
     * of scales, quantized from the live shard by rs_quant_box into the
     * arena, after the shards' bytes; a shard with no whole block serves
     * nothing quantized, and receivers quantize the blocks that straddle
     * shards themselves. A non-finite value fails rs_publisher_publish
     * (RS_ERR_INPUT naming tensor, spec and block): nothing of that version
     * is published. Which tensors: `quantize`, num_quantize "GLOB=SPEC"
     * strings (fnmatch(3) over tensor names, the last '=' splitting, e.g.
     * "*.mlp.experts.*.weight=fp8_block:128x128:f8e4m3"; copied and
     * checked by rs_publisher_create, RS_ERR_INVALID_ARG naming the entry),
     * and with quantize_wanted = 1 every (T, S) the model's cuts records
     * ask for (rs_cuts_add_quant: receivers announce the quantized copies
     * of their captures), read as cut_aligned reads them, before staging
     * each version, and those of `cuts` and `cuts_file` (a cuts file of
     * an inference layout, `reshard cuts`, lists its quantized copies). A tensor that cannot take a spec (dtype other than
     * bf16, f16, f32; rank below the block's) is told through `notice`
     * once and served without it. Any of them with another staging is
     * refused by rs_publisher_create (RS_ERR_INVALID_ARG naming both). The
     * slot's geometry key stays that of the registered shards. */
    const char *const *quantize;
    size_t num_quantize;
    int quantize_wanted;
    /* Deltas (docs/delta.md): in arena staging, each version is copied
     * into the arena over the previous one and, in the same pass, a delta
     * of every served shard against that previous version is written
     * ("reshard.delta.v1") into memory served beside the arena; the table
     * lists it beside the full bytes (docs/formats.md, "Deltas"). The
     * deltas of the last delta_keep versions stay served, so a receiver one
     * or two versions behind can apply them in turn. Default 2; 0: no
     * deltas. Ignored in other stagings. A shard whose delta would pass
     * half its bytes gets none that version (receivers read it whole). */
    int64_t delta_keep;
} rs_publisher_params_t;

/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/architecture.md, "Option structs"). */
RS_API void rs_publisher_params_init_sized(rs_publisher_params_t *params,
                                           size_t size);
#define rs_publisher_params_init(p) \
    rs_publisher_params_init_sized((p), sizeof(*(p)))
RS_API rs_status_t rs_publisher_create(const rs_publisher_params_t *params,
                                       rs_diag_t *diag,
                                       rs_publisher_h *publisher_p);
/* Stops heartbeats, unexposes every region, frees the publisher's
 * allocations (and its arena), closes the directory. */
RS_API void rs_publisher_destroy(rs_publisher_h publisher);

/* Allocates nbytes (> 0) of zeroed, page-aligned memory from the
 * publisher's exposer (rs_exposer_alloc): for ucx, UCX's own allocation,
 * which readers on this machine copy one-sided; for cma, anonymous pages.
 * A caller holds its tensors there and registers them (any staging; in
 * RS_STAGING_IN_PLACE only such memory may be registered). The memory is
 * the publisher's until rs_publisher_free or rs_publisher_destroy, and
 * survives re-exposing. When UCX gives ordinary memory although shared
 * memory is configured (sysv or /dev/shm limits), the notice callback is
 * told once per publisher: reads of it are emulated, so slower.
 * Errors: RS_ERR_INVALID_ARG (no publisher or output, nbytes 0),
 * RS_ERR_NO_MEMORY, RS_ERR_TRANSPORT (the exposer could not be created).
 * Cost: the allocation, plus for ucx a probe of the memory's key. */
RS_API rs_status_t rs_publisher_alloc(rs_publisher_h publisher,
                                      uint64_t nbytes, rs_diag_t *diag,
                                      void **ptr_p);

/* Frees memory from rs_publisher_alloc. RS_ERR_INVALID_ARG when ptr is not
 * such an allocation or a registered shard lies in it (naming the
 * tensor): unregister it first. */
RS_API rs_status_t rs_publisher_free(rs_publisher_h publisher, void *ptr,
                                     rs_diag_t *diag);

/* Registers one shard: `ptr` holds the row-major box (offset, shape) of the
 * full tensor, in memory of type `mem`. Registration after the first publish
 * is allowed; the next publish re-exposes (new addresses mean a new topology
 * for receivers). The publisher borrows ptr until it is destroyed (in arena
 * staging it only reads it, during rs_publisher_publish).
 * Errors: RS_ERR_UNSUPPORTED for any mem but RS_MEM_HOST (naming the type
 * and the tensor; ptr is not read), RS_ERR_INVALID_ARG for a mem outside
 * rs_mem_type_t, a bad shard (rank, dtype; a box leaving its full shape in
 * some dim, negative or overflowing offsets and extents, as receivers'
 * sources would refuse it: "publisher: tensor 'w': shard of session 's'
 * leaves the full shape in dim 0 (offset -1, shape 4, full 8)"),
 * (RS_STAGING_IN_PLACE) a shard not inside
 * one rs_publisher_alloc allocation, or a box that shares an element with
 * a registered box of the same tensor, the same box included (a receiver
 * would get the bytes of one of them): "publisher: tensor 'w': box [0:4,
 * 0:8] is registered twice on this rank ...", or "... overlaps box [2:6,
 * 0:8] registered before on this rank (both hold [2:4, 0:8]) ..."; a box
 * with another number of dims than the tensor's registered boxes likewise.
 * Nothing is registered then. Cost: O(registered boxes of the tensor),
 * O(registered shards) once after an unregister. */
RS_API rs_status_t rs_publisher_register(rs_publisher_h publisher,
                                         const char *tensor, rs_dtype_t dtype,
                                         int ndim, const int64_t *full_shape,
                                         const int64_t *offset,
                                         const int64_t *shape, void *ptr,
                                         rs_mem_type_t mem, rs_diag_t *diag);

/* Unregisters the shard of `tensor` whose box starts at `offset` (as many
 * entries as the tensor has dims, as given to rs_publisher_register; every
 * shard registered with that tensor and offset goes). From the moment it
 * returns its memory is no longer exposed and may be freed: a running
 * exposer is torn down and the heartbeat stopped, so the version published
 * last is no longer served, and the next rs_publisher_publish exposes the
 * remaining shards and lists only them. Call it after
 * rs_publisher_wait_released: a receiver still pulling the last version
 * fails and does not install (ucx: its reads are refused; cma, which reads
 * the process without an exposer, may read whatever the memory holds by
 * then, which digest verification, on by default, refuses).
 * Errors: RS_ERR_INVALID_ARG when no such shard is registered
 * ("publisher: cannot unregister tensor 'w': no shard of it is registered
 * at offset [2, 0]"); nothing changes then. Cost:
 * O(registered shards), plus the exposer's teardown. */
RS_API rs_status_t rs_publisher_unregister(rs_publisher_h publisher,
                                           const char *tensor,
                                           const int64_t *offset,
                                           rs_diag_t *diag);

/* Publishes this rank's table for `version` (creating the version with
 * `world` slots if needed): the shards' bytes must be final. In
 * RS_STAGING_ARENA the shards are first copied into the arena (O(bytes);
 * the arena grows, at new addresses, when the registered shards outgrow
 * it), and the caller's tensors are free again once this returns.
 * Publishing the version the arena already holds again (a republish)
 * copies nothing. Publishing another version while the arena's version is
 * not released (checked once in the directory when
 * rs_publisher_wait_released has not seen it) is refused with
 * RS_ERR_INVALID_ARG naming both versions, the arena untouched: receivers
 * may still be reading it. Call rs_publisher_wait_released first. With
 * publisher-side quantization (quantize, quantize_wanted) the quantized
 * copies are made then too, O(bytes quantized) more; a non-finite value
 * is RS_ERR_INPUT naming the tensor, spec and block, and no table of the
 * version is published (a later publish of it stages it again). */
RS_API rs_status_t rs_publisher_publish(rs_publisher_h publisher,
                                        int64_t version, rs_diag_t *diag);

/* The entries of the table published last: its non-empty shards, or in
 * cut-aligned publishing the sub-boxes they were cut into, plus two per
 * quantized box (values and scales); 0 before the first publish. O(1). */
RS_API size_t rs_publisher_num_served(rs_publisher_h publisher);

/* Waits until `version` is released by the directory (every receiver's
 * lease ended and someone released it). A directory outage does not end
 * the wait: it is retried until timeout_s (RS_ERR_TIMEOUT then names it).
 * The version published last that vanished from the directory (a server
 * restarted without its data) is published again from the table kept at
 * its publish, with a notice, and the wait goes on, as long as it is still
 * served as it was (no registration changed since; in RS_STAGING_ARENA the
 * arena still holds it). Any other missing version is RS_ERR_INVALID_ARG
 * naming it, nothing published: one this publisher never published
 * ("publisher: version 7 was never published by trainer-0 (rank 0); ..."),
 * or one it can no longer serve as it was (a later version published, the
 * registrations changed). */
RS_API rs_status_t rs_publisher_wait_released(rs_publisher_h publisher,
                                              int64_t version,
                                              double timeout_s,
                                              rs_diag_t *diag);

/* Raises the publisher's cancel flag (reshard/cancel.h): a
 * rs_publisher_wait_released in progress, or the next one, returns
 * RS_ERR_CANCELLED within RS_CANCEL_POLL_S ("cancelled while waiting for
 * the release of version ..."), and so does every later one until
 * rs_publisher_cancel_clear. Nothing else of the publisher changes.
 * Thread-safe and async-signal-safe (one atomic store). NULL: no-op. */
RS_API void rs_publisher_cancel(rs_publisher_h publisher);
RS_API void rs_publisher_cancel_clear(rs_publisher_h publisher);

typedef struct rs_receiver_params {
    size_t size; /* the caller's sizeof, set by rs_receiver_params_init */
    const char *directory;
    const char *model;
    const char *backend;    /* transport: "ucx" (default) or "cma" */
    uint64_t salt;          /* replica choice (this rank's index) */
    /* Lease holder name; default "receiver-<salt>-<host>-<pid>", with
     * ".<n>" from the process's second receiver on. Names must be unique:
     * a stage under a name another receiver's live lease holds is refused
     * (RS_ERR_INPUT naming it). A release_after names this holder as the
     * version's releaser. */
    const char *holder;
    double discover_timeout_s; /* waiting for READY; default 60 */
    double stale_s;         /* publishers silent longer are stale; 0 = off
                             * (the default here: a table published with
                             * rs_dir_publish has no heartbeat; reshard pull
                             * and the Python Receiver default to 5 s).
                             * Stale versions are skipped by version -1 */
    /* The lease a pull or a stage holds on its version (see
     * rs_receiver_stage): its ttl (default 60 s) and how often a thread
     * renews it while the version is pulled or staged (<= 0, the default:
     * ttl / 3). A period at or above the ttl lets the lease lapse between
     * renewals, and such a pull refuses to install whenever the lapse is
     * seen. */
    double lease_ttl_s;
    double lease_renew_s;
    /* > 0: one deadline for the whole pull or stage (discover, lease,
     * tables, plan, connect, wire, replay, casts, verify), in seconds from
     * the call (a separate apply has none). Every
     * wait inside gets at most what is left; a pull past it fails with
     * RS_ERR_TIMEOUT naming the stage it was in, before install. Default 0:
     * no overall bound (each wait keeps its own timeout). */
    double pull_timeout_s;
    int release_after;      /* release the version after installing */
    int64_t max_segments_per_copy; /* 0 = planner default */
    /* 1 (default): the executor reads into receiver-owned staging buffers
     * (one per bound parameter, allocated by rs_receiver_bind), copied into
     * the bound storage only by apply, after every check passed, so a
     * failed pull never touches the bound parameters. 0: rs_receiver_pull
     * reads straight into the bound storage (half the memory; a failed pull
     * may leave it partly written, though install is still not called), and
     * rs_receiver_stage is refused (RS_ERR_INVALID_ARG): a stage never
     * writes the bound parameters. */
    int shadow;
    /* The executor's settings (see rs_exec_params_t): */
    double timeout_s;          /* per transport wait; default 60 s */
    int verify_digests;        /* default 1 here (off in the executor) */
    int verify_partial;
    int require_full_coverage;
    double coverage_floor;     /* default RS_EXEC_DEFAULT_COVERAGE_FLOOR */
    double max_gbps;
    /* Called by apply once the staged bytes are in the bound parameters
     * (the exec handle is rs_receiver_exec's); a non-RS_OK return fails the
     * apply with that status, the bytes already copied. */
    rs_install_cb install;
    void *install_ctx;
    /* Wire progress, as in rs_exec_params_t (called on the staging
     * thread). */
    rs_progress_cb progress;
    void *progress_ctx;
    uint64_t progress_chunk_bytes;
    /* Notices of directory outages during discovery (retried until
     * discover_timeout_s); NULL: stderr. */
    rs_dir_notice_cb notice;
    void *notice_ctx;
    /* Cut announcement (docs/cut-aligned.md). 1 (the
     * default): before its first stage, pull or dry run, the receiver
     * writes the cut points its capture needs (rs_cuts_add_capture, as
     * reshard.cuts.v1) to the directory as the cuts record `announce_as`
     * of the model (rs_dir_put_cuts), once; cut-aligned publishers cut the
     * versions they stage after it for this receiver. The record also
     * lists the capture's quantized copies (source and spec), which
     * publishers with quantize_wanted serve quantized from then on. It is one small
     * write per receiver and changes nothing for other publishers. A
     * failed announcement is told through `notice` and tried again before
     * the next pull; it never fails a pull. 0: no announcement (see
     * rs_receiver_announce_cuts). */
    int announce_cuts;
    /* The record's name; NULL (default): the lease holder name. The default
     * holder holds the process id, so a rank that restarts should pass a
     * stable name ("vllm-tp2-rank0"): its record is then replaced instead
     * of left beside the old one (rs_dir_drop_cuts removes records). */
    const char *announce_as;
    /* The planner's cost model (rs_plan_params_t): NIC rate in Gb/s and
     * cost of one read descriptor in ns; defaults RS_PLAN_DEFAULT_NIC_GBPS
     * and RS_PLAN_DEFAULT_DESCRIPTOR_NS; both must be positive and finite
     * (the pull that plans refuses others with RS_ERR_INVALID_ARG). */
    double nic_gbps;
    double descriptor_ns;
    /* Group commit (docs/refit.md, "Group commit"): the ranks of one
     * engine replica (tensor-, expert-, pipeline-parallel) give the same
     * `group` name and `group_size`, and each its own `group_rank` in
     * [0, group_size). Their applies of a version then install together
     * or not at all: each rank's apply reports STAGED in the directory's
     * group record and waits until every rank did; installs, keeping the
     * bytes it replaced in its staging; reports APPLIED (or FAILED) and
     * waits for the group's decision: COMMITTED (every rank applied) keeps
     * the new bytes, ABORTED (a rank failed, or a wait ran out) puts the
     * old ones back. Every wait is bounded by group_timeout_s (default
     * 60 s); a wait that runs out aborts the attempt, naming the ranks it
     * waited for. Needs shadow = 1. NULL (default): each receiver applies
     * on its own. */
    const char *group;
    int64_t group_size;
    int64_t group_rank;
    double group_timeout_s;
    /* The executor's staging budget (rs_exec_params_t.staging_budget): 0
     * (default) 1 GiB, or the largest single staged box when bigger;
     * RS_STAGING_UNBOUNDED every box at once; else a hard bound. The
     * shadows (`shadow`) are not staging: they are a second copy of every
     * bound parameter, outside the budget. */
    uint64_t staging_budget;
    /* A publisher whose reads make no progress for stall_s seconds (a
     * frozen process, a link that drops everything without a reset)
     * counts as failed, like one whose reads fail, while its slot has
     * another publisher to read: the pull fails over to it
     * (docs/directory.md, "Replicas"). Without another publisher the
     * reads wait as they do without a stall bound: up to timeout_s per
     * wait, within pull_timeout_s. Default RS_RECEIVER_DEFAULT_STALL_S;
     * <= 0: no stall bound. Honoured by the ucx backend (cma reads the
     * publisher's memory whether it runs or not). */
    double stall_s;
    /* Deltas (docs/delta.md, "Receivers"). 1 (the default): a read whose
     * shard's publisher serves deltas and whose destination holds the
     * base of the deltas the tables list (a chain of them when it is
     * versions behind), once a pull of that base passed verification,
     * reads, where the cost model (nic_gbps, descriptor_ns) prefers it,
     * only the delta's header, index entries and payload span, patches
     * what it holds and verifies the full new digests as a full pull
     * does; a refused delta, or a run whose verification fails after
     * patching, reads the full bytes instead. Reads landing in the
     * shadows (shadow = 1), and staged, cast and quantized reads when
     * the executor's staging takes one round (with shadow = 0 too), are
     * patched in place, with no copy and no memory of their own; the
     * others (staged reads when the staging takes rounds, every other
     * read with shadow = 0: the bound parameters are never patched)
     * keep a copy of their own within delta_budget. A new plan or a
     * failover starts with nothing held (full reads). Needs
     * verify_digests (without it every read is whole). 0: every read
     * whole, no copies. */
    int delta;
    /* The most bytes the copies above may hold (docs/delta.md, "The delta
     * budget"): the reads whose copies save most wire time per byte kept
     * are kept first; the others are read whole every version. Default
     * RS_RECEIVER_DEFAULT_DELTA_BUDGET (0: no copies, deltas in place
     * only); RS_DELTA_UNBOUNDED: every read worth a copy. A copy that
     * would not fit half the memory available (rs_memory_available,
     * looked at once a pull) is not made: its read is whole, the pull
     * goes on, and `notice` says so. */
    uint64_t delta_budget;
} rs_receiver_params_t;

/* 0: copies are opt-in. A copy doubles the memory of the bytes it holds
 * and costs a copy in and out on every pull (docs/delta.md, "The delta
 * budget": 3x the first pull, 1.5x to 3x a warm one on a memory-speed
 * link); the reads that land in the shadows take deltas without one. */
#define RS_RECEIVER_DEFAULT_DELTA_BUDGET ((uint64_t)0)
#define RS_DELTA_UNBOUNDED UINT64_MAX

#define RS_RECEIVER_DEFAULT_STALL_S 5.0

/* Fills *params with the defaults; `size` is the caller's sizeof (the
 * macro passes it), so a program built against older headers gets the
 * defaults it knew. The call taking the struct refuses a size below the
 * first version's or above this library's with RS_ERR_INVALID_ARG naming
 * the struct (docs/architecture.md, "Option structs"). */
RS_API void rs_receiver_params_init_sized(rs_receiver_params_t *params,
                                          size_t size);
#define rs_receiver_params_init(p) \
    rs_receiver_params_init_sized((p), sizeof(*(p)))

/* The receiver borrows the capture (it must outlive the receiver). */
RS_API rs_status_t rs_receiver_create(const rs_receiver_params_t *params,
                                      rs_capture_h capture, rs_diag_t *diag,
                                      rs_receiver_h *receiver_p);
/* Discards a staged version (dropping its lease), closes everything. */
RS_API void rs_receiver_destroy(rs_receiver_h receiver);

/* Writes this receiver's cuts record now (see announce_cuts), whatever
 * announce_cuts says, replacing the one it wrote before. Errors: those of
 * rs_cuts_add_capture (RS_ERR_INPUT naming a tensor) and rs_dir_put_cuts
 * (the cap, directory errors). Cost: O(copies of the capture) plus the
 * record's bytes. */
RS_API rs_status_t rs_receiver_announce_cuts(rs_receiver_h receiver,
                                             rs_diag_t *diag);

/* Binds a capture parameter to its live storage (memory of type `mem`),
 * borrowed until rebound or the receiver is destroyed. With shadow = 1 it
 * also allocates the parameter's staging (nbytes) and copies the storage
 * into it, so bytes no copy writes (padding) keep their values on apply:
 * O(nbytes).
 * Errors: RS_ERR_UNSUPPORTED for any mem but RS_MEM_HOST (naming the type
 * and the param; base is not read), RS_ERR_INVALID_ARG for a mem outside
 * rs_mem_type_t, no such parameter, or a version staged (the previous
 * binding stays then), RS_ERR_NO_MEMORY (the staging; the parameter is
 * then left unbound). */
RS_API rs_status_t rs_receiver_bind(rs_receiver_h receiver, size_t param,
                                    void *base, uint64_t nbytes,
                                    rs_mem_type_t mem, rs_diag_t *diag);

typedef struct rs_staged *rs_staged_h;

/* One publisher that failed within a pull (its reads failed, timed out or
 * stalled, or connecting to it failed) and the error it failed with. */
#define RS_PULL_FAILURES_MAX 8
#define RS_PULL_FAILURE_WHY_MAX 320
typedef struct rs_pull_failure {
    char publisher[RS_DIR_NAME_MAX + 1];
    int64_t slot;
    char why[RS_PULL_FAILURE_WHY_MAX];
} rs_pull_failure_t;

typedef struct rs_pull_result {
    int64_t version;
    int replanned;          /* 1 when the plan was (re)built for this pull */
    /* discover_s: waiting for READY, taking the lease and reading every
     * table (tables_s of it); plan_s: planning, connecting (connect_s of
     * it) and creating the executor, 0 when the cached plan was reused. */
    double discover_s, plan_s, connect_s;
    rs_exec_stats_t exec;
    uint64_t lease_epoch;        /* the epoch of the pull's lease */
    uint64_t lease_renewals;     /* renewals by the renewal thread */
    uint64_t lease_renew_errors; /* renewals that could not reach the
                                  * directory (retried) */
    /* release_after: RS_OK when the version was released, else why not
     * (RS_ERR_INCOMPLETE: another receiver's live lease, named in
     * release_msg). The pull itself succeeded either way. */
    rs_status_t release_status;
    char release_msg[RS_DIAG_MSG_MAX];
    /* The figures without JSON: the executor's stages of this pull (wire,
     * replay, convert, verify; install: the lease proof, the copy from
     * staging into the bound parameters and the install callback), bytes
     * on the wire and descriptors. The same figures as the stage record of
     * rs_receiver_exec (rs_exec_write_stages writes this struct). */
    rs_exec_stages_t stages;
    double tables_s;          /* reading and merging every slot's table */
    double stage_s, apply_s;  /* the whole stage, the whole apply */
    uint64_t bytes_installed; /* copied from staging into the bound
                               * parameters (0 with shadow = 0) */
    uint32_t sessions;        /* publishers the plan reads from */
    /* Publishers replaced within this pull after reading from them failed
     * (a slot with several publishers), and which: "<agent>, slot <S> ->
     * <agent>; ..." (empty when none). */
    uint32_t failovers;
    char failover_msg[RS_DIAG_MSG_MAX];
    /* The tables step (docs/refit.md, "The tables"): slots whose parsed
     * table was reused (only the version's digests read and placed),
     * slots read whole and parsed, and the bytes read from the directory
     * for them; summed over the transfers of a pull with failovers. */
    uint32_t tables_reused, tables_parsed;
    uint64_t table_bytes_read;
    /* Every publisher that failed within this pull, the first
     * RS_PULL_FAILURES_MAX of them in slot order (nfailures counts all);
     * each failover replaced one of them. */
    uint32_t nfailures;
    rs_pull_failure_t failures[RS_PULL_FAILURES_MAX];
    /* Deltas (delta = 1): reads served from deltas, the bytes read for
     * them (headers, index entries, payloads) and the full bytes they
     * stand for; reads read whole and their bytes; deltas refused (read
     * whole instead, counted there too); 1 when a run's verification
     * failed after patching and the version was read again whole. */
    uint64_t delta_runs, delta_bytes, delta_full_bytes;
    uint64_t whole_runs, whole_bytes, delta_refused;
    int delta_retried;
    /* The copies after the pull (delta_budget): pieces and bytes held for
     * the next version; pieces (and bytes) worth a copy the budget left
     * out; copies not made because they did not fit the memory available
     * (each also told through `notice`). */
    uint64_t delta_held_runs, delta_held_bytes;
    uint64_t delta_over_budget_runs, delta_over_budget_bytes;
    uint64_t delta_no_memory_runs, delta_no_memory_bytes;
    /* Of delta_runs and delta_full_bytes: the reads patched in place, in
     * the shadows (shadow = 1), with no copy and no budget. */
    uint64_t delta_in_place_runs, delta_in_place_bytes;
} rs_pull_result_t;

/* The publishers that failed within the receiver's last stage or pull,
 * whether it succeeded or not (a failed pull writes no result): copies
 * the first `cap` of the kept ones (at most RS_PULL_FAILURES_MAX) into
 * out (NULL with cap 0: none) and returns how many failed in all. 0 for a
 * NULL receiver or before the first stage. */
RS_API uint32_t rs_receiver_failures(rs_receiver_h receiver,
                                     rs_pull_failure_t *out, uint32_t cap);

/* Pulls `version` (< 0: the newest READY one): rs_receiver_stage then
 * rs_receiver_apply, within one deadline (pull_timeout_s, also checked
 * before apply). With shadow = 0 the bytes land straight in the bound
 * storage and apply only proves the lease and installs. On any error the
 * install callback is not called (and, with shadow = 1, the bound storage is
 * untouched), and nothing stays staged or leased. Refused while a version
 * is staged (RS_ERR_INVALID_ARG).
 *
 * Errors: those of rs_receiver_stage and rs_receiver_apply; a deadline
 * passed before apply is RS_ERR_TIMEOUT ("deadline passed in the install
 * stage"), a cancel raised by then RS_ERR_CANCELLED (the staged version
 * discarded, nothing installed). */
RS_API rs_status_t rs_receiver_pull_sized(rs_receiver_h receiver,
                                          int64_t version, rs_diag_t *diag,
                                          rs_pull_result_t *result_p,
                                          size_t result_size);
#define rs_receiver_pull(r, v, d, res) \
    rs_receiver_pull_sized((r), (v), (d), (res), sizeof(*(res)))

/* Stages `version` (< 0: the newest READY one) without touching the bound
 * parameters: discovers it, takes a lease on it, reads every table, plans
 * (or reuses the cached plan when the topology is unchanged), connects,
 * reads into the staging buffers, replays, casts and verifies. The bound
 * parameters may be read and written by other threads meanwhile.
 *
 * The lease is taken with a fresh epoch right after discovery and renewed
 * by a thread every lease_renew_s for as long as the version stays staged
 * (also while the wire is stalled, and after this call returns), until
 * apply or discard. Apply proves the lease was held without a gap: no
 * renewal found it over, and a last renewal, atomic with the check that
 * the same epoch is still live, succeeds. A live lease makes release
 * impossible, so the version was not released and the publishers did not
 * refill their buffers while any byte was read. A renewal that only failed
 * to reach the directory is retried; it breaks nothing unless the lease
 * lapsed meanwhile, which the next renewal reports.
 *
 * Slots with several publishers: each slot is read from one of them
 * (chosen by salt, preferring publishers whose heartbeat is younger than
 * stale_s); when reading from it fails (connect, RS_ERR_TRANSPORT or
 * RS_ERR_TIMEOUT of a read), the same stage transfers again from another
 * publisher of that slot, under the same deadline and still into the
 * staging buffers, recording the failover in the result; later pulls of this
 * receiver choose a publisher that failed last, until it publishes another
 * table (restarted). When every publisher of a slot failed, the error
 * names each ("<agent>, slot <S>: <cause>").
 *
 * On success *staged_p is the receiver's staged version: one per receiver,
 * owned by it, valid until rs_receiver_apply or rs_receiver_discard
 * consumes it (or the receiver is destroyed). While staged,
 * rs_receiver_bind is refused.
 *
 * Errors (nothing staged, no lease left, bound parameters untouched):
 * RS_ERR_INVALID_ARG (a version is staged already, naming it; shadow = 0);
 * those of the directory (discovery; RS_ERR_VERIFY for a table corrupted
 * in the directory), planning, connecting and the executor's run (a read
 * that failed or timed out is RS_ERR_TRANSPORT / RS_ERR_TIMEOUT, its message naming the publisher as "<agent>, slot <S>"
 * and the cause; the connections are dropped and rebuilt next time);
 * RS_ERR_TIMEOUT when pull_timeout_s passed ("deadline passed in the
 * <stage> stage"); RS_ERR_CANCELLED when rs_receiver_cancel raised the
 * receiver's flag. */
RS_API rs_status_t rs_receiver_stage(rs_receiver_h receiver, int64_t version,
                                     rs_diag_t *diag, rs_staged_h *staged_p);

/* Installs a staged version: proves its lease (above), copies the staged
 * bytes into the bound parameters, calls the install callback, drops the
 * lease and, with release_after, releases the version (the outcome in
 * result_p's release_status). No deadline applies (pull_timeout_s bounds
 * the stage); the lease proof rides out a directory outage for up to
 * lease_ttl_s. `staged` is consumed either way (RS_OK or not).
 *
 * Errors: RS_ERR_INVALID_ARG (`staged` is not this receiver's staged
 * version: NULL, applied or discarded already, or from a failed stage);
 * RS_ERR_VERIFY when the lease was not held throughout ("refusing to
 * install: lease ... was not held throughout the pull", with the cause:
 * lapsed, taken again, version released): the bound parameters untouched
 * and install not called, never a mix of two versions. A failing install
 * callback's status (the bound parameters then hold the new version). */
RS_API rs_status_t rs_receiver_apply_sized(rs_receiver_h receiver,
                                           rs_staged_h staged,
                                           rs_diag_t *diag,
                                           rs_pull_result_t *result_p,
                                           size_t result_size);
#define rs_receiver_apply(r, s, d, res) \
    rs_receiver_apply_sized((r), (s), (d), (res), sizeof(*(res)))

/* Results that grow (docs/architecture.md, "Result structs"): the _sized
 * calls write only the first result_size bytes of rs_pull_result_t (the
 * macros above pass the caller's sizeof), so a program built against
 * older headers never gets more than its struct holds, and refuse a size
 * below RS_PULL_RESULT_V1_SIZE or above this library's struct with
 * RS_ERR_INVALID_ARG before anything happens. A NULL result_p writes
 * nothing (write `(rs_pull_result_t *)NULL` through the macros). The
 * unsized entry points below are those of programs built before results
 * were sized: they write RS_PULL_RESULT_V1_SIZE bytes, the struct as it
 * was then (through delta_retried). */
#define RS_PULL_RESULT_V1_SIZE                                   \
    (offsetof(rs_pull_result_t, delta_retried) + sizeof(int))
RS_API rs_status_t(rs_receiver_pull)(rs_receiver_h receiver, int64_t version,
                                     rs_diag_t *diag,
                                     rs_pull_result_t *result_p);
RS_API rs_status_t(rs_receiver_apply)(rs_receiver_h receiver,
                                      rs_staged_h staged, rs_diag_t *diag,
                                      rs_pull_result_t *result_p);

/* Drops a staged version: stops its lease renewal and drops the lease (so
 * the version can be released). The bound parameters are untouched.
 * Accepts NULL and a handle already consumed (no-op). */
RS_API void rs_receiver_discard(rs_receiver_h receiver, rs_staged_h staged);

/* Raises the receiver's cancel flag (reshard/cancel.h): a stage, pull or
 * dry run in progress, or the next one, stops within RS_CANCEL_POLL_S of
 * its current wait (discovery, connecting, the reads, between the
 * executor's stages and waves) and returns RS_ERR_CANCELLED, as any failed
 * stage: nothing staged, its lease dropped, the bound parameters
 * untouched (a pull cancelled after its stage discards it before
 * install). Every later stage, pull or dry run returns RS_ERR_CANCELLED
 * too, until rs_receiver_cancel_clear; apply, discard and destroy are not
 * affected. Thread-safe and async-signal-safe (one atomic store), so
 * another thread or a SIGINT handler may call it while a stage runs.
 * NULL: no-op. */
RS_API void rs_receiver_cancel(rs_receiver_h receiver);
/* Clears the flag, so that the next stage, pull or dry run runs. */
RS_API void rs_receiver_cancel_clear(rs_receiver_h receiver);

/* The version a staged handle holds, or -1 for a consumed one. */
RS_API int64_t rs_staged_version(rs_staged_h staged);

/* The executor of the last stage, pull or dry run (for its stage and
 * coverage records), or NULL before the first and after a transport
 * failure. After a dry run its sessions are not connected yet: run it only
 * through rs_receiver_stage or rs_receiver_pull. Its
 * records describe the last run: a failed apply shows as failure
 * "install". */
RS_API rs_exec_h rs_receiver_exec(rs_receiver_h receiver);

/* What a pull of a version would do, found without doing it. */
typedef struct rs_dry_run {
    int64_t version;
    int replanned;          /* 1: this call built the plan; 0: the cached
                             * plan was reused (with the version's digests) */
    int complete;           /* rs_plan_is_complete: a pull would not refuse
                             * it for fallback or uncovered copies */
    uint64_t bytes;         /* bytes a pull would read */
    uint64_t descriptors;   /* reads it would post */
    size_t sessions;        /* publishers it would read from (connect to) */
    size_t tables, shards;  /* tables read, shards they publish */
    /* seconds: waiting for READY, reading and parsing the tables, the
     * topology fingerprint, planning (or renewing digests of the cached
     * plan), working out the figures below (prepare_s: the executor is not
     * prepared, which would allocate its staging), the call */
    double discover_s, tables_s, fingerprint_s, plan_s, prepare_s, total_s;
    /* as rs_pull_result_t's: parsed tables reused, tables parsed, bytes
     * read from the directory for the tables */
    uint32_t tables_reused, tables_parsed;
    uint64_t table_bytes_read;
    /* The memory a pull of this plan holds, none of it allocated by the dry
     * run: the capture's parameters (the caller's storage), the receiver's
     * shadows of them (0 with shadow = 0), and the executor's staging under
     * the staging budget (the largest round), every staged box at once,
     * and the rounds. */
    uint64_t param_bytes, shadow_bytes;
    uint64_t staging_bytes, staging_unbounded, staging_rounds;
} rs_dry_run_t;

/* A pull of `version` (< 0: the newest READY one) up to the wire: waits for
 * READY (within discover_timeout_s and pull_timeout_s), reads every slot's
 * table, fingerprints the topology, plans (or reuses the cached plan, taking
 * the new digests) and works out what the plan reads and holds. It connects
 * to no publisher, reads no shard byte, takes no lease (the lease guards the
 * bytes a pull reads; the tables are read by discovery alone, with or
 * without one), calls no install and allocates neither staging nor
 * parameters: the executor is not prepared (the first pull prepares it),
 * and parameters need not be bound. The transport is created (for ucx its
 * context and worker) but left unconnected: a later pull reusing this plan
 * connects first.
 *
 * A plan that is not complete is not an error: result_p->complete says so.
 * Errors: RS_ERR_INVALID_ARG while a version is staged (its executor holds
 * the staged bytes); those of discovery, the tables and planning; those of
 * rs_exec_staging_need (RS_ERR_INVALID_ARG names a staged box above an
 * explicit staging budget). On error the cache is dropped only if planning
 * failed. Cost: O(tables + shards + plan) on a reused plan, plus planning
 * otherwise. */
RS_API rs_status_t rs_receiver_dry_run_sized(rs_receiver_h receiver,
                                             int64_t version, rs_diag_t *diag,
                                             rs_dry_run_t *result_p,
                                             size_t result_size);
#define rs_receiver_dry_run(r, v, d, res) \
    rs_receiver_dry_run_sized((r), (v), (d), (res), sizeof(*(res)))

/* A result that grows as rs_pull_result_t does (above, and
 * docs/architecture.md, "Result structs"): rs_receiver_dry_run_sized
 * writes only the first result_size bytes of rs_dry_run_t and refuses a
 * size below RS_DRY_RUN_V1_SIZE (the struct through staging_rounds, its
 * first layout) or above this library's before anything happens. The
 * function rs_receiver_dry_run, for programs built before the result was
 * sized, writes RS_DRY_RUN_V1_SIZE bytes. */
#define RS_DRY_RUN_V1_SIZE \
    (offsetof(rs_dry_run_t, staging_rounds) + sizeof(uint64_t))
RS_API rs_status_t(rs_receiver_dry_run)(rs_receiver_h receiver,
                                        int64_t version, rs_diag_t *diag,
                                        rs_dry_run_t *result_p);

/* The cached plan (of the last pull or dry run), or NULL when there is
 * none, for per-session figures (rs_plan_session_bytes). Borrowed until the
 * next pull, dry run or destroy. O(1). */
RS_API rs_plan_h rs_receiver_plan(rs_receiver_h receiver);

#ifdef __cplusplus
}
#endif
#endif
