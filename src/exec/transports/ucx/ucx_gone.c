/* How the `ucx` transport words a failure against one session: a peer
 * whose process ended (its shared-memory segment gone, its socket refusing
 * or resetting, an endpoint timing out) is said to be gone, once, with
 * UCX's own words in parentheses; any other failure keeps UCX's status. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/diag.h"
#include "exec/transports/ucx/ucx_impl.h"

/* UCX's line for these names the symptom of a vanished process. */
static int cause_says_gone(const char *cause)
{
    static const char *const marks[] = {
        "shmat", "shm_open", "Connection refused", "Connection reset",
        "Broken pipe", "No such process", "not connected",
    };
    for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
        if (strstr(cause, marks[i]) != NULL)
            return 1;
    return 0;
}

int rs__ucx_peer_gone(ucs_status_t us, const char *cause)
{
    switch (us) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_SHMEM_SEGMENT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
        return 1;
    default:
        return cause != NULL && cause_says_gone(cause);
    }
}

rs_status_t rs__ucx_peer_failed(rs_diag_t *diag, uint32_t session,
                                const char *name, const char *what,
                                ucs_status_t us, unsigned long mark)
{
    char cause[200] = "";
    int kept = rs__ucx_quiet_cause(mark, cause, sizeof(cause));
    if (rs__ucx_peer_gone(us, kept ? cause : NULL))
        return rs__diag_set(diag, RS_ERR_TRANSPORT, "session %" PRIu32
                            " (%s): the publisher is gone or unreachable "
                            "(%s: %s%s%s)", session, name, what,
                            ucs_status_string(us), kept ? "; UCX: " : "",
                            cause);
    return rs__diag_set(diag, RS_ERR_TRANSPORT, "session %" PRIu32
                        " (%s): %s: %s%s%s%s", session, name, what,
                        ucs_status_string(us), kept ? " (UCX: " : "", cause,
                        kept ? ")" : "");
}
