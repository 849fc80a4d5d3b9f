/* The cancel flag: relaxed atomic accesses suffice, since a wait only needs
 * to see the raise eventually (within its next poll), and nothing else is
 * published through the flag. Lock-free on an int, so signal-safe. */
#include <stddef.h>

#include "reshard/cancel.h"

void rs_cancel_raise(rs_cancel_t *cancel)
{
    if (cancel != NULL)
        __atomic_store_n(&cancel->raised, 1, __ATOMIC_RELAXED);
}

void rs_cancel_clear(rs_cancel_t *cancel)
{
    if (cancel != NULL)
        __atomic_store_n(&cancel->raised, 0, __ATOMIC_RELAXED);
}

int rs_cancel_raised(const rs_cancel_t *cancel)
{
    return cancel != NULL && __atomic_load_n(&cancel->raised,
                                             __ATOMIC_RELAXED) != 0;
}
