/* Base64 (RFC 4648, with padding), used to carry transport blobs in shard
 * tables' agent_meta_b64. */
#ifndef RS_CORE_BASE64_H
#define RS_CORE_BASE64_H

#include <stddef.h>
#include "reshard/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Base64 (RFC 4648, with padding) for carrying blobs in shard tables'
 * agent_meta_b64. Output is NUL-terminated; the caller frees it. */
rs_status_t rs__base64_encode(const void *data, size_t len,
                                    char **text_p);
rs_status_t rs__base64_decode(const char *text, void **data_p,
                                    size_t *len_p);

#ifdef __cplusplus
}
#endif
#endif
