/* A backend's one ops table: its name, its reading half (the transport) and
 * its exposing half (NULL for backends that only read within this process,
 * local and local-mt). transport.c and expose.c find backends here, so no
 * shared code asks which backend it has. */
#ifndef RS_EXEC_BACKEND_H
#define RS_EXEC_BACKEND_H

#include "exec/expose_impl.h"
#include "exec/transport_impl.h"

typedef struct rs__backend {
    const char *name;
    const rs__transport_ops_t *transport;
    const rs__exposer_ops_t *exposer;
} rs__backend_t;

/* Each backend's table, defined in its folder under transports/. */
extern const rs__backend_t rs__backend_local;
extern const rs__backend_t rs__backend_local_mt;
extern const rs__backend_t rs__backend_cma;
extern const rs__backend_t rs__backend_ucx;

/* The backend called `name`, or NULL. */
const rs__backend_t *rs__backend_find(const char *name);

#endif
