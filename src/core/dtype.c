/* Dtype names, aliases and sizes. */
#include <string.h>

#include "reshard/dtype.h"

typedef struct {
    rs_dtype_t dtype;
    const char *names[4]; /* first is canonical */
    size_t size;
} dtype_entry_t;

static const dtype_entry_t dtype_table[] = {
    {RS_DTYPE_F32, {"f32", "float32", "torch.float32", NULL}, 4},
    {RS_DTYPE_BF16, {"bf16", "bfloat16", "torch.bfloat16", NULL}, 2},
    {RS_DTYPE_F16, {"f16", "float16", "half", "torch.float16"}, 2},
    {RS_DTYPE_F8E4M3, {"f8e4m3", "float8_e4m3fn", "torch.float8_e4m3fn", NULL}, 1},
    {RS_DTYPE_F8E5M2, {"f8e5m2", "float8_e5m2", "torch.float8_e5m2", NULL}, 1},
    {RS_DTYPE_F64, {"f64", "float64", "torch.float64", NULL}, 8},
    {RS_DTYPE_I8, {"i8", "int8", "torch.int8", NULL}, 1},
    {RS_DTYPE_U8, {"u8", "uint8", "torch.uint8", NULL}, 1},
    {RS_DTYPE_I16, {"i16", "int16", "torch.int16", NULL}, 2},
    {RS_DTYPE_I32, {"i32", "int32", "torch.int32", NULL}, 4},
    {RS_DTYPE_I64, {"i64", "int64", "torch.int64", NULL}, 8},
    {RS_DTYPE_BOOL, {"bool", "torch.bool", NULL, NULL}, 1},
};

#define NDTYPES (sizeof(dtype_table) / sizeof(dtype_table[0]))

rs_dtype_t rs_dtype_parse(const char *name)
{
    if (name == NULL)
        return RS_DTYPE_INVALID;
    for (size_t i = 0; i < NDTYPES; i++) {
        for (size_t j = 0; j < 4 && dtype_table[i].names[j] != NULL; j++) {
            if (strcmp(name, dtype_table[i].names[j]) == 0)
                return dtype_table[i].dtype;
        }
    }
    return RS_DTYPE_INVALID;
}

static const dtype_entry_t *dtype_lookup(rs_dtype_t dtype)
{
    for (size_t i = 0; i < NDTYPES; i++) {
        if (dtype_table[i].dtype == dtype)
            return &dtype_table[i];
    }
    return NULL;
}

const char *rs_dtype_name(rs_dtype_t dtype)
{
    const dtype_entry_t *e = dtype_lookup(dtype);
    return e != NULL ? e->names[0] : "invalid";
}

/* Every entry has its torch.* spelling among its names. */
const char *rs_dtype_torch_name(rs_dtype_t dtype)
{
    const dtype_entry_t *e = dtype_lookup(dtype);
    for (size_t j = 0; e != NULL && j < 4 && e->names[j] != NULL; j++) {
        if (strncmp(e->names[j], "torch.", 6) == 0)
            return e->names[j];
    }
    return "invalid";
}

size_t rs_dtype_size(rs_dtype_t dtype)
{
    const dtype_entry_t *e = dtype_lookup(dtype);
    return e != NULL ? e->size : 0;
}
