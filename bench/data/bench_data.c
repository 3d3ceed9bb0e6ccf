/* Benchmarks of accel_data.h (JSON lines, DESIGN.md → Testing):
   - index generation per core, sequential and shuffled shards: vs the goal (50 M indices/s/core) and vs a
     plain C loop writing sequential int64 indices, measured in this run; torch's BatchSampler as a peer when
     /usr/bin/python3 has torch;
   - memory independent of N: RSS growth of a child process while it builds a shuffled shard over N = 1e3 and
     N = 1e9 and reads batches all over the epoch;
   - token loader read throughput (file bytes/s, sequence loader over a freshly written page-cache-warm GPT-2
     shard) vs `cat file > /dev/null` of the same file, same run. */
#include "accel_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* CPU seconds of this process: these machines are shared, so throughput is per CPU-second (= per core). */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double children_cpu(void) {
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static void line(const char *bench, const char *params, const char *unit, double accel, double ref, const char *ref_name,
                 double goal) {
    char g[32];
    if (goal > 0) snprintf(g, sizeof g, "%.3g", goal);
    else snprintf(g, sizeof g, "null"); /* context only: the issue sets no goal for this ratio */
    printf("{\"bench\": \"%s\", \"params\": {%s}, \"unit\": \"%s\", \"accel\": %.4g, \"reference\": %.4g, "
           "\"reference_name\": \"%s\", \"ratio\": %.3f, \"goal\": %s}\n", bench, params, unit, accel, ref, ref_name,
           ref > 0 ? accel / ref : 0.0, g);
    fflush(stdout);
}

static volatile int64_t sink;

/* indices per second through accel_data_shard_next for a whole epoch of this process's shard */
static double shard_rate(int64_t n, int64_t B, int shuffle) {
    accel_data_shard sh;
    accel_data_shard_desc d;
    int64_t *buf, count, total = 0, acc = 0;
    double t0, best = 0;
    int rep;
    memset(&d, 0, sizeof d);
    d.dataset_len = n; d.batch_size = B; d.num_processes = 4; d.process_index = 1; d.shuffle = shuffle; d.seed = 7;
    accel_data_shard_init(NULL, &sh, &d);
    buf = (int64_t *)malloc(sizeof(int64_t) * (size_t)B);
    for (rep = 0; rep < 3; ++rep) {
        total = 0;
        t0 = now();
        while (accel_data_shard_next(&sh, buf, &count) == ACCEL_OK && count > 0) {
            total += count;
            acc += buf[count - 1];
        }
        t0 = now() - t0;
        if (total / t0 > best) best = (double)total / t0;
    }
    sink = acc;
    free(buf);
    return best;
}

static double plain_rate(int64_t n, int64_t B) {
    int64_t *buf = (int64_t *)malloc(sizeof(int64_t) * (size_t)B), i, k, acc = 0;
    double t0, best = 0;
    int rep;
    for (rep = 0; rep < 3; ++rep) {
        t0 = now();
        for (k = 0; k < n; k += B) {
            int64_t m = n - k < B ? n - k : B;
            for (i = 0; i < m; ++i) buf[i] = k + i;
            acc += buf[m - 1];
        }
        t0 = now() - t0;
        if ((double)n / t0 > best) best = (double)n / t0;
    }
    sink = acc;
    free(buf);
    return best;
}

static double torch_rate(int64_t n, int64_t B) {
    char cmd[1024];
    FILE *p;
    double r = -1;
    if (access("/usr/bin/python3", X_OK) != 0) return -1;
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import time,sys\ntry:\n from torch.utils.data import BatchSampler, RandomSampler\n"
             "except Exception: print(-1); sys.exit(0)\nimport torch\ng=torch.Generator(); g.manual_seed(7)\n"
             "t=time.perf_counter(); c=0\nfor b in BatchSampler(RandomSampler(range(%lld), generator=g), %lld, False): "
             "c+=len(b)\nprint(c/(time.perf_counter()-t))\" 2>/dev/null", (long long)n, (long long)B);
    p = popen(cmd, "r");
    if (!p) return -1;
    if (fscanf(p, "%lf", &r) != 1) r = -1;
    pclose(p);
    return r;
}

static long rss_kib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* RSS growth (KiB) of a child while it builds a shuffled shard over n samples and reads 2000 batches spread over
   the whole epoch (the buffers are allocated before the first reading, so only the shard itself can grow it) */
static long child_rss(int64_t n) {
    int fd[2];
    pid_t pid;
    long kb = -1;
    if (pipe(fd) != 0) return -1;
    pid = fork();
    if (pid == 0) {
        accel_data_shard sh;
        accel_data_shard_desc d;
        static int64_t buf[64];
        int64_t count, k, len, acc = 0;
        long before;
        close(fd[0]);
        memset(buf, 0, sizeof buf);
        memset(&d, 0, sizeof d);
        d.dataset_len = n; d.batch_size = 64; d.num_processes = 8; d.process_index = 3; d.shuffle = 1; d.seed = 1;
        before = rss_kib();
        accel_data_shard_init(NULL, &sh, &d);
        len = accel_data_shard_len(&sh);
        for (k = 0; k < 2000; ++k) {
            accel_data_shard_get_batch(&sh, (k * 7919) % len, buf, &count);
            acc += buf[0];
        }
        sink = acc;
        kb = rss_kib() - before;
        if (write(fd[1], &kb, sizeof kb) != (ssize_t)sizeof kb) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    if (read(fd[0], &kb, sizeof kb) != (ssize_t)sizeof kb) kb = -1;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    return kb;
}

/* best of 5: rate by CPU time of the children (sh + cat) and by wall time */
static void cat_rate(const char *path, double bytes, double *cpu_rate, double *wall_rate) {
    char cmd[600];
    int rep;
    *cpu_rate = *wall_rate = 0;
    snprintf(cmd, sizeof cmd, "cat '%s' > /dev/null", path);
    for (rep = 0; rep < 5; ++rep) {
        double c0 = children_cpu(), w0 = wall(), c, w;
        if (system(cmd) != 0) return;
        c = children_cpu() - c0;
        w = wall() - w0;
        if (c > 0 && bytes / c > *cpu_rate) *cpu_rate = bytes / c;
        if (bytes / w > *wall_rate) *wall_rate = bytes / w;
    }
}

/* the loader in a fresh child each time (its own page-table faults, like cat's own reads); CPU and wall rates */
static void loader_rate(const char *path, double bytes, double *cpu_rate, double *wall_rate) {
    int rep;
    *cpu_rate = *wall_rate = 0;
    for (rep = 0; rep < 5; ++rep) {
        int fd[2];
        pid_t pid;
        double r[2] = {-1, -1};
        if (pipe(fd) != 0) return;
        pid = fork();
        if (pid == 0) {
            accel_data_seq_loader ld;
            accel_data_seq_desc d;
            const char *files[1];
            int32_t *buf;
            int got;
            int64_t acc = 0;
            double c0, w0;
            close(fd[0]);
            files[0] = path;
            memset(&d, 0, sizeof d);
            d.files = files; d.num_files = 1; d.batch_size = 16; d.seq_len = 1024; d.num_processes = 1;
            buf = (int32_t *)malloc(sizeof(int32_t) * 16 * 1025);
            c0 = now(); w0 = wall();
            if (accel_data_seq_init(NULL, &ld, &d) != ACCEL_OK) _exit(1);
            while (accel_data_seq_next(&ld, buf, &got) == ACCEL_OK && got) acc += buf[16 * 1025 - 1];
            accel_data_seq_deinit(&ld);
            r[0] = bytes / (now() - c0);
            r[1] = bytes / (wall() - w0);
            sink = acc;
            if (write(fd[1], r, sizeof r) != (ssize_t)sizeof r) _exit(1);
            _exit(0);
        }
        close(fd[1]);
        if (read(fd[0], r, sizeof r) != (ssize_t)sizeof r) r[0] = r[1] = -1;
        close(fd[0]);
        waitpid(pid, NULL, 0);
        if (r[0] > *cpu_rate) *cpu_rate = r[0];
        if (r[1] > *wall_rate) *wall_rate = r[1];
    }
}

int main(void) {
    const int64_t N = 200000000, B = 64; /* 4 processes: this one generates N/4 indices */
    char params[256];
    double seq, shuf, plain, torch;
    seq = shard_rate(N, B, 0) / 1e6;
    shuf = shard_rate(N, B, 1) / 1e6;
    plain = plain_rate(N / 4, B) / 1e6;
    snprintf(params, sizeof params, "\"dataset_len\": %lld, \"batch_size\": %lld, \"num_processes\": 4", (long long)N,
             (long long)B);
    line("shard_indices_sequential", params, "M indices/s/core", seq, 50, "issue goal 50 M indices/s/core", 1.0);
    line("shard_indices_shuffled", params, "M indices/s/core", shuf, 50, "issue goal 50 M indices/s/core", 1.0);
    line("shard_indices_sequential_vs_loop", params, "M indices/s/core", seq, plain,
         "plain C loop writing sequential int64 indices", -1);
    line("shard_indices_shuffled_vs_loop", params, "M indices/s/core", shuf, plain,
         "plain C loop writing sequential int64 indices", -1);
    torch = torch_rate(10000000, B);
    if (torch > 0)
        line("shard_indices_shuffled_vs_torch", "\"dataset_len\": 10000000, \"batch_size\": 64", "M indices/s/core",
             shuf, torch / 1e6, "torch BatchSampler(RandomSampler) in /usr/bin/python3", -1);
    else
        fprintf(stderr, "torch not available in /usr/bin/python3: no torch line\n");
    {
        long small = child_rss(1000), big = child_rss(1000000000), t;
        int rep;
        for (rep = 0; rep < 2; ++rep) {
            t = child_rss(1000); if (t >= 0 && t < small) small = t;
            t = child_rss(1000000000); if (t >= 0 && t < big) big = t;
        }
        snprintf(params, sizeof params, "\"small_n\": 1000, \"big_n\": 1000000000, \"shuffle\": true, "
                 "\"shard_struct_bytes\": %zu", sizeof(accel_data_shard));
        /* higher is better; +4 KiB (one page) on both sides keeps 0/0 defined */
        printf("{\"bench\": \"shard_memory_independent_of_n\", \"params\": {%s}, \"unit\": \"KiB RSS growth\", "
               "\"accel\": %ld, \"reference\": %ld, \"reference_name\": \"the same child at N=1e3 (ratio = "
               "(reference+4)/(accel+4))\", \"ratio\": %.3f, \"goal\": 0.95}\n", params, big, small,
               (double)(small + 4) / (double)(big + 4));
        fflush(stdout);
    }
    {
        const char *t = getenv("TMPDIR");
        char dir[300], path[400];
        int64_t ntok = 96 * 1024 * 1024, i; /* 192 MiB of uint16 tokens */
        int32_t header[256];
        uint16_t *chunk;
        FILE *f;
        double bytes;
        snprintf(dir, sizeof dir, "%s/accel_bench_data_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
        snprintf(path, sizeof path, "%s/tokens.bin", dir);
        f = fopen(path, "wb");
        if (!f) { perror(path); return 1; }
        memset(header, 0, sizeof header);
        header[0] = 20240520; header[1] = 1; header[2] = (int32_t)ntok;
        fwrite(header, sizeof header, 1, f);
        chunk = (uint16_t *)malloc(sizeof(uint16_t) * 1048576);
        for (i = 0; i < 1048576; ++i) chunk[i] = (uint16_t)(i * 31 % 50257);
        for (i = 0; i < ntok / 1048576; ++i) fwrite(chunk, sizeof(uint16_t), 1048576, f);
        fclose(f);
        free(chunk);
        bytes = 1024.0 + 2.0 * (double)ntok;
        {
            double cat_cpu, cat_wall, ld_cpu, ld_wall;
            cat_rate(path, bytes, &cat_cpu, &cat_wall); /* warm the page cache */
            cat_rate(path, bytes, &cat_cpu, &cat_wall);
            loader_rate(path, bytes, &ld_cpu, &ld_wall);
            line("token_loader_read_cpu", "\"file_bytes\": 201327616, \"format\": \"gpt2-uint16\", \"B\": 16, \"T\": 1024",
                 "GB per CPU-second", ld_cpu / 1e9, cat_cpu / 1e9, "cat file > /dev/null (page-cache warm, CPU time)", 0.9);
            line("token_loader_read_wall", "\"file_bytes\": 201327616, \"format\": \"gpt2-uint16\", \"B\": 16, \"T\": 1024",
                 "GB/s", ld_wall / 1e9, cat_wall / 1e9, "cat file > /dev/null (page-cache warm, wall time)", 0.9);
        }
        unlink(path);
        rmdir(dir);
    }
    return 0;
}
