/* File-system helpers shared by tests that write directories (POSIX). */
#ifndef ACCEL_TEST_FS_H
#define ACCEL_TEST_FS_H
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* rm -rf without a shell: the tests' scratch dirs may hold names a shell would mangle */
static void at_rm_rf(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char sub[4096];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            at_rm_rf(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}
#endif
