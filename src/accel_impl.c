/* The one implementation TU of the project's own build (tests, tools, examples link it). accel.h comes first so
   its POSIX feature macros precede every system header. */
#define ACCEL_IMPLEMENTATION
#include "accel.h"
#include "accel_hostgroup.h"
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
