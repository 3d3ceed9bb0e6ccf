/* File-system helpers shared by tests that write directories (POSIX). */
#ifndef ACCEL_TEST_FS_H
#define ACCEL_TEST_FS_H
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* rm -rf without a shell: the tests' scratch dirs may hold names a shell would mangle */
static inline void at_rm_rf(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char sub[4096];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= sizeof sub) continue; /* too deep */
            at_rm_rf(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* The whole file in a malloc'd buffer (+1 spare byte), NULL when it can't be read completely. */
static inline unsigned char *at_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long sz;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = sz >= 0 ? (unsigned char *)malloc((size_t)sz + 1) : NULL;
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); b = NULL; }
    fclose(f);
    *n = b ? (size_t)sz : 0;
    return b;
}

static inline int at_exists(const char *p) { struct stat st; return stat(p, &st) == 0; }
static inline long at_file_size(const char *p) { struct stat st; return stat(p, &st) == 0 ? (long)st.st_size : -1; }
/* Writes n bytes to path (created or truncated); reports a failure on stderr (the checks that follow then fail). */
static inline void at_write_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return; }
    if (fwrite(b, 1, n, f) != n) perror(path);
    fclose(f);
}

/* Runs fn(arg) in a forked child that may take at most `seconds` (alarm): returns fn's value (the child's exit
   status, 0..255), or -1 when the child was killed (the call hung past the alarm, or crashed). For inputs that could
   block a call forever (a FIFO where a file is expected): a regression fails the check instead of hanging the test. */
static inline int at_bounded(int (*fn)(void *), void *arg, unsigned seconds) {
    int st = 0;
    pid_t c;
    fflush(NULL);
    c = fork();
    if (c == 0) {
        alarm(seconds);
        _exit(fn(arg) & 255);
    }
    if (c < 0 || waitpid(c, &st, 0) != c) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
#endif
