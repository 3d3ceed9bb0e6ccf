/* A user TU: every header, no implementation. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_ddp.h"
#include "accel_zero.h"
#include "accel_data.h"
#include "accel_amp.h"
#include "accel_optim.h"
#include "accel_safetensors.h"
#include "accel_ckpt.h"
#include "accel_bigmodel.h"
#include "accel_trackers.h"
#include "accel_profile.h"
const char *link_tu_a(void) { return accel_dtype_name(ACCEL_BF16); }
