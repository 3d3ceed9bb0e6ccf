/* accel_ckpt.h — (module under construction; see its issue). Depends only on accel.h. */
#ifndef ACCEL_CKPT_H_INCLUDED
#define ACCEL_CKPT_H_INCLUDED
#include "accel.h"
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* ACCEL_CKPT_H_INCLUDED */

#if defined(ACCEL_IMPLEMENTATION) && !defined(ACCEL__CKPT_IMPL_DONE)
#define ACCEL__CKPT_IMPL_DONE
#endif
