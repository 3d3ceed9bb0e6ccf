/* The version meson installs (accel.pc, the project's version) is the headers' (ACCEL_VERSION_*): the two are
   written in two places, and accel.pc said 0.1.0 while the headers said 0.2.0 (issue 30). */
#include "accel.h"
#include <stdio.h>
#include <string.h>

int main(void) {
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH);
    if (strcmp(v, ACCEL_PROJECT_VERSION) != 0) {
        printf("FAIL: meson.build's version %s (accel.pc) is not the headers' %s\n", ACCEL_PROJECT_VERSION, v);
        return 1;
    }
    printf("version %s: meson.build and accel.h agree\n", v);
    return 0;
}
