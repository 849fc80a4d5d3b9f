/* Memory types: their names and the host-only check (core/memory.h). */
#include "core/memory.h"

#include "core/diag.h"

const char *rs_mem_type_str(rs_mem_type_t mem)
{
    switch (mem) {
    case RS_MEM_HOST: return "host";
    case RS_MEM_CUDA: return "cuda";
    case RS_MEM_ROCM: return "rocm";
    }
    return "invalid";
}

rs_status_t rs__mem_check(rs_mem_type_t mem, const char *who,
                          rs_diag_t *diag)
{
    switch (mem) {
    case RS_MEM_HOST:
        return RS_OK;
    case RS_MEM_CUDA:
    case RS_MEM_ROCM:
        /* host code would read the pointer (digests, shadow copies,
         * casts): refuse before anything does */
        return rs__diag_set(diag, RS_ERR_UNSUPPORTED, "%s: memory type %s "
                            "is not supported (only host memory can be "
                            "moved)", who, rs_mem_type_str(mem));
    }
    return rs__diag_set(diag, RS_ERR_INVALID_ARG, "%s: invalid memory type "
                        "%d", who, (int)mem);
}
