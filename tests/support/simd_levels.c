/* The SIMD levels the kernels' tests run at (simd_levels.h). */
#include "core/simd.h"
#include "simd_levels.h"

int simd_nlevels(void)
{
    return (int)rs__simd_best() + 1;
}

int simd_restore_level(void **state)
{
    (void)state;
    rs__simd_force(rs__simd_best());
    return 0;
}
