/* Growable arrays: rs__vec_reserve grows a (data, cap) pair geometrically. */
#ifndef RS_CORE_VEC_H
#define RS_CORE_VEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Ensures room for `need` elements of `elsize`; 0 on exhaustion (the old
 * buffer stays valid). */
static inline int rs__vec_reserve(void **data, size_t *cap, size_t need,
                                 size_t elsize)
{
    if (need <= *cap)
        return 1;
    size_t ncap = *cap < 16 ? 16 : *cap;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2)
            return 0;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elsize)
        return 0;
    void *p = realloc(*data, ncap * elsize);
    if (p == NULL)
        return 0;
    *data = p;
    *cap = ncap;
    return 1;
}

/* Declares the three fields of a vector of T inside a struct. */
#define RS_VEC(T, name) \
    T *name;            \
    size_t name##_len;  \
    size_t name##_cap

/* Appends one element; evaluates to 0 on exhaustion. */
#define RS_VEC_PUSH(owner, name, value)                                       \
    (rs__vec_reserve((void **)&(owner)->name, &(owner)->name##_cap,            \
                    (owner)->name##_len + 1, sizeof(*(owner)->name))          \
         ? ((owner)->name[(owner)->name##_len++] = (value), 1)                \
         : 0)

#endif
