/* accel_collectives.h — (module under construction; see its issue). Depends only on accel.h. */
#ifndef ACCEL_COLLECTIVES_H_INCLUDED
#define ACCEL_COLLECTIVES_H_INCLUDED
#include "accel.h"
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_COLLECTIVES_H_INCLUDED */

#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__COLLECTIVES_IMPL_DONE)
#define ACCEL__COLLECTIVES_IMPL_DONE
#endif
