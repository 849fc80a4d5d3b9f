/* Shared pieces of the redis:// directory backend: the connection state,
 * the Lua scripts that make each operation atomic (redis_lua.c) and the
 * call that runs one of them against a version's keys (redis.c). */
#ifndef RS_DIR_REDIS_IMPL_H
#define RS_DIR_REDIS_IMPL_H

#include <hiredis/hiredis.h>

#include "dir/dir_impl.h"

/* Scripts, one per operation (redis_lua.c). */
typedef enum rs__redis_script {
    RS_RLUA_CREATE,
    RS_RLUA_PUBLISH,
    RS_RLUA_HEARTBEAT,
    RS_RLUA_LOOKUP,
    RS_RLUA_SLOT_STATUS,
    RS_RLUA_READ,
    RS_RLUA_LIST,
    RS_RLUA_LEASE,
    RS_RLUA_UNLEASE,
    RS_RLUA_RELEASE,
    RS_RLUA_PUT_CUTS,
    RS_RLUA_READ_CUTS,
    RS_RLUA_DROP_CUTS,
    RS_RLUA_LIST_CUTS,
    RS_RLUA_GROUP,
    RS_RLUA_LEASES,
    RS_RLUA_GEOMETRY_PUT,
    RS_RLUA_GEOMETRY_GET,
    RS_RLUA_COUNT
} rs__redis_script_t;

/* Every script gets KEYS = meta, slots, hb, leases, versions, members of
 * the request's version, the model's cuts and cutgen hashes, its geometry
 * and geomgen hashes (split entries' documents, redis_geometry.c), and
 * ARGV[1] =
 * "version V of 'M'" for its messages. */
extern const char *const rs__redis_script_src[RS_RLUA_COUNT];

#define RS_RDIR_HOST_MAX 256
#define RS_RDIR_SECRET_MAX 256

typedef struct rs__redis_dir {
    char host[RS_RDIR_HOST_MAX];
    int port;
    char user[RS_RDIR_SECRET_MAX];     /* empty: none */
    char password[RS_RDIR_SECRET_MAX]; /* empty: no AUTH */
    int has_password;
    double timeout_s;                  /* connect and each command */
    char where[RS_RDIR_HOST_MAX + 16]; /* "host:port" for messages */
    redisContext *c;                   /* NULL or broken: reconnect */
    int transient;                     /* the last failure may pass */
    char sha[RS_RLUA_COUNT][41];       /* loaded scripts; "" until loaded */
} rs__redis_dir_t;

/* Runs script `id` for req's version with ARGV[2..] = args (binary safe).
 * Script errors "RSINPUT ..." and "RSINCOMPLETE ..." become RS_ERR_INPUT
 * and RS_ERR_INCOMPLETE; a lost or refused connection RS_ERR_TRANSPORT
 * naming host:port. The caller frees *reply_p (never an error reply). */
rs_status_t rs__redis_dir_eval(rs_dir_h dir, rs__redis_script_t id, const rs__dir_request_t *req,
                          const char **args, const size_t *lens, int nargs,
                          rs_diag_t *diag, redisReply **reply_p);

/* Reads a script's reply into req (RS_ERR_INPUT through
 * rs__redis_dir_bad_reply when it is not what the script gives). */
typedef rs_status_t (*rs__redis_fill_fn)(rs_dir_h dir, const redisReply *rep,
                                       rs__dir_request_t *req, rs_diag_t *diag);
/* rs__redis_dir_eval, then fill (NULL: the reply is not needed) on the reply,
 * which is freed. */
rs_status_t rs__redis_dir_run(rs_dir_h dir, rs__redis_script_t id, rs__dir_request_t *req,
                         const char **args, const size_t *lens, int nargs,
                         rs__redis_fill_fn fill, rs_diag_t *diag);

/* Messages about malformed replies (a server that is not ours). */
rs_status_t rs__redis_dir_bad_reply(rs_dir_h dir, const char *what,
                               rs_diag_t *diag);

/* Ops in redis_ops.c. */
rs__dir_op_t rs__redis_dir_create;
rs__dir_op_t rs__redis_dir_publish;
/* Cuts records (redis_cuts.c): the hashes rs:{M}:cuts, holder -> record,
 * and rs:{M}:cutgen, holder -> its generation (16 hex digits). */
rs__dir_op_t rs__redis_dir_list_cuts;
rs__dir_op_t rs__redis_dir_put_cuts;
rs__dir_op_t rs__redis_dir_read_cuts;
rs__dir_op_t rs__redis_dir_drop_cuts;
rs__dir_op_t rs__redis_dir_heartbeat;
rs__dir_op_t rs__redis_dir_lookup;
rs__dir_op_t rs__redis_dir_slot_status;
rs__dir_op_t rs__redis_dir_read;
rs__dir_op_t rs__redis_dir_list;
rs__dir_op_t rs__redis_dir_lease;
rs__dir_op_t rs__redis_dir_unlease;
rs__dir_op_t rs__redis_dir_release;
/* Group records: the field "group:<name>" of the version's meta hash
 * (kept after release, like the meta hash itself). */
rs__dir_op_t rs__redis_dir_group;
rs__dir_op_t rs__redis_dir_leases;
/* Geometry documents (redis_geometry.c): rs:{M}:geometry, "<slot>@<P>" ->
 * document, and rs:{M}:geomgen, "<slot>@<P>" -> its digest (16 hex). */
rs__dir_op_t rs__redis_dir_geometry_put;
rs__dir_op_t rs__redis_dir_geometry_get;

#endif
