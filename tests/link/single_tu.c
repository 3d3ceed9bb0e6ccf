/* ACCEL_STATIC single-TU embedding: everything static, nothing exported. */
#define ACCEL_STATIC
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
#include <stdio.h>
int main(void) {
    int ok = accel_dtype_size(ACCEL_F16) == 2 && accel_dtype_from_name("F8_E5M2") == ACCEL_F8_E5M2;
    printf("static: %d passed, %d failed\n", ok, !ok);
    return ok ? 0 : 1;
}
