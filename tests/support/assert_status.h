/* Typed assertions on a status and its diagnostic, printing both statuses
 * and the message on failure (cmocka's fail_msg). The message is printed
 * only when the call failed: after RS_OK the diag is not written. */
#ifndef RS_TEST_ASSERT_STATUS_H
#define RS_TEST_ASSERT_STATUS_H

#include <string.h>

#include "reshard/status.h"

#define ASSERT_ST(call, want, d)                                              \
    do {                                                                      \
        rs_status_t got_ = (call);                                            \
        if (got_ != (want))                                                   \
            fail_msg("%s: got %s, want %s (%s)", #call,                       \
                     rs_status_str(got_), rs_status_str(want),                \
                     got_ != RS_OK ? (d).msg : "");                           \
    } while (0)

#define ASSERT_MSG_HAS(d, text)                                               \
    do {                                                                      \
        if (strstr((d).msg, (text)) == NULL)                                  \
            fail_msg("message '%s' lacks '%s'", (d).msg, (text));             \
    } while (0)

#endif
