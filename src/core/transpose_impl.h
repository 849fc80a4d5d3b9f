/* The transpose kernels of one instruction-set level, as one ops table:
 * line tiles for each element size and, where the level has them,
 * non-temporal row stores. transpose.c walks matrices with them. */
#ifndef RS_CORE_TRANSPOSE_IMPL_H
#define RS_CORE_TRANSPOSE_IMPL_H

#include <stddef.h>

/* Bytes in one row of a line tile: one cache line. */
#define RS__TR_LINE 64

/* A line tile of elements of size es: E x E elements with E = RS__TR_LINE /
 * es, so every source and destination row of it is one cache line. dst row
 * j, column i gets source row i, column j; row starts are dld and sld bytes
 * apart. Any alignment. */
typedef void (*rs__transpose_line_fn)(unsigned char *d, size_t dld,
                               const unsigned char *s, size_t sld);

/* Copies `rows` rows of RS__TR_LINE bytes from a 64-byte aligned buffer
 * (rows RS__TR_LINE apart) to d, rows dld apart, with non-temporal stores;
 * d and dld are multiples of 64. */
typedef void (*rs__transpose_stream_fn)(unsigned char *d, size_t dld,
                                 const unsigned char *buf, size_t rows);

typedef struct rs__transpose_ops {
    rs__transpose_line_fn line[4];    /* element sizes 1, 2, 4, 8 */
    rs__transpose_line_fn line_nt[4]; /* the same with non-temporal stores, for
                                * destination rows at multiples of 64 bytes;
                                * NULL: line into a buffer, then stream */
    rs__transpose_stream_fn stream;   /* NULL: the level has no streaming stores */
    void (*fence)(void);     /* orders streaming stores before later ones */
} rs__transpose_ops_t;

/* Portable C (SWAR on little-endian, element loops elsewhere). */
extern const rs__transpose_ops_t rs__transpose_ops_portable;

#if defined(__x86_64__) && defined(__GNUC__)
#define RS__TR_X86 1
extern const rs__transpose_ops_t rs__transpose_ops_sse2;
extern const rs__transpose_ops_t rs__transpose_ops_avx2;
extern const rs__transpose_ops_t rs__transpose_ops_avx512;
#else
#define RS__TR_X86 0
#endif

#endif
