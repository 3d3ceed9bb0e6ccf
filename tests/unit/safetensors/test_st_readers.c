/* The checkpoint loader's parallel reads (accel_safetensors.h: a device load preads each 8 MiB staging chunk with up to 4
   threads, each a 4 KiB-aligned slice). Driven here on the CPU through the private helpers:
     - every length/offset pair (slice edges, sub-MiB chunks read by the caller alone, unaligned offsets) gives the
       bytes the generator wrote, checked against the generator itself (not against another read);
     - 1, 2, 3 and 4 readers; a read past the end of the file and a closed descriptor fail with -1 and errno, and the
       readers are still there for the next call (no hang, no helper left writing);
     - stopping joins every helper (a second stop, and a stop of a never-started stage, do nothing). */
#define ACCEL_IMPLEMENTATION
#define ACCEL_STATIC
#include "accel.h"
#include "accel_safetensors.h"
#include "accel_test.h"
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_BYTES (((size_t)20 << 20) + 123)

static unsigned char gen_byte(size_t i) { /* position-dependent: a slice read at the wrong offset differs */
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17) ^ (i >> 12));
}

int main(void) {
    char dir[] = "/tmp/accel_readers_XXXXXX", path[256];
    unsigned char *data, *buf;
    size_t i;
    int fd, readers;
    static const size_t lens[] = {1, 4095, ((size_t)1 << 20) - 1, (size_t)1 << 20, ((size_t)1 << 20) + 1,
                                  (size_t)3 << 20, (size_t)8 << 20, ((size_t)8 << 20) + 7};
    static const uint64_t offs[] = {0, 1, 4096, 4097, ((size_t)12 << 20) + 5};
    AT_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/f.bin", dir);
    data = (unsigned char *)malloc(FILE_BYTES);
    buf = (unsigned char *)malloc(((size_t)8 << 20) + 128); /* the longest read (8 MiB + 7) and its 64-byte guard */
    AT_CHECK(data && buf);
    for (i = 0; i < FILE_BYTES; ++i) data[i] = gen_byte(i);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    AT_CHECK(fd >= 0 && write(fd, data, FILE_BYTES) == (ssize_t)FILE_BYTES);
    close(fd);
    fd = open(path, O_RDONLY);
    AT_CHECK(fd >= 0);
    for (readers = 1; readers <= 4; ++readers) {
        accel__st_stage s;
        size_t li, oi;
        accel__st_stage_begin(&s, NULL);
        accel__st_readers_start(&s, readers);
        AT_EQ_INT(s.nhelp, readers - 1);
        for (li = 0; li < sizeof lens / sizeof lens[0]; ++li)
            for (oi = 0; oi < sizeof offs / sizeof offs[0]; ++oi) {
                size_t len = lens[li];
                uint64_t off = offs[oi];
                if (off + len > FILE_BYTES) continue;
                memset(buf, 0xA5, len + 64);
                AT_EQ_INT(accel__st_stage_pread(&s, fd, buf, len, off), 0);
                if (memcmp(buf, data + off, len) != 0) {
                    size_t k = 0;
                    while (buf[k] == data[off + k]) ++k;
                    AT_CHECK_MSG(0, "parallel read differs from the file");
                    fprintf(stderr, "  readers %d, len %zu, off %llu: first difference at byte %zu\n", readers, len,
                            (unsigned long long)off, k);
                }
                AT_EQ_INT(buf[len], 0xA5); /* nothing written past the end */
            }
        /* past the end of the file: an error, and the readers still work afterwards */
        errno = 0;
        AT_EQ_INT(accel__st_stage_pread(&s, fd, buf, (size_t)8 << 20, FILE_BYTES - ((size_t)4 << 20)), -1);
        AT_CHECK(errno != 0);
        AT_EQ_INT(accel__st_stage_pread(&s, fd, buf, (size_t)2 << 20, 777), 0);
        AT_CHECK(memcmp(buf, data + 777, (size_t)2 << 20) == 0);
        {
            int bad = open(path, O_RDONLY);
            close(bad); /* a descriptor that is no longer open */
            errno = 0;
            AT_EQ_INT(accel__st_stage_pread(&s, bad, buf, (size_t)4 << 20, 0), -1);
            AT_EQ_INT(errno, EBADF);
        }
        accel__st_readers_stop(&s);
        AT_EQ_INT(s.nhelp, 0);
        accel__st_readers_stop(&s); /* idempotent */
        accel__st_stage_end(&s);    /* stops nothing more, frees nothing it does not own */
    }
    close(fd);
    unlink(path);
    rmdir(dir);
    free(data);
    free(buf);
    return at_finish("safetensors-readers");
}
