#include "accel_profile.h"
#include "accel_trackers.h"
#include "accel_bigmodel.h"
#include "accel_ckpt.h"
#include "accel_safetensors.h"
#include "accel_optim.h"
#include "accel_amp.h"
#include "accel_data.h"
#include "accel_zero.h"
#include "accel_ddp.h"
#include "accel_collectives.h"
#include "accel_hostgroup.h"
#include "accel.h"
#include <stdio.h>
#include <string.h>
const char *link_tu_a(void);
int main(void) {
    /* both user TUs reach the one implementation */
    if (strcmp(link_tu_a(), "BF16") != 0 || accel_version() != ACCEL_VERSION_NUMBER) { puts("link: 0 passed, 1 failed"); return 1; }
    puts("link: 1 passed, 0 failed");
    return 0;
}
