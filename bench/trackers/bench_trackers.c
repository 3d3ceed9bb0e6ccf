/* log() throughput of the TensorBoard and JSONL writers against writing the very same bytes with the same call
   pattern and durability, measured in the same run (DESIGN.md → Testing). One JSON line per measurement.
     tensorboard: accel_track_log (encode Event + 2 masked CRC32C + timestamp, into its 64 KiB write buffer) vs
                  fwrite() of each record of the produced file through a 64 KiB stdio buffer; both timed up to the
                  final write-out (accel_track_flush / fflush; the fsync+close after it is not timed on either side).
     jsonl:       accel_track_log (format + escape + one write(2) per line) vs fwrite()+fflush() of each line of the
                  produced file.
     peer:        when the `tensorboard` Python package is importable, its EventFileWriter (the writer under
                  torch.utils.tensorboard.SummaryWriter) writing the same scalars; skipped otherwise.
   Goals (a cost model, not a measurement): tensorboard 0.25 — log() validates the names, reads the clock, encodes
   the Event into its buffer and runs two CRC passes over it, where the reference only copies: about four passes
   over the bytes against one. jsonl 0.3 (issue 19) — each scalar becomes the shortest decimal that reads back to
   the same double (accel's own digit algorithm, about 30-50 ns; glibc's printf + strtod took 330-470 ns), names are
   validated and escaped, the clock is read, and both sides pay one write(2) per 4-scalar line (about 1.4 us).
   tensorboard's Python writer: 1.0 (a C writer should not lose to it).
   usage: bench_trackers [calls] */
#include "accel.h"
#include "accel_trackers.h"
#include "accel_test_fs.h" /* tests/: the same scratch-dir helpers as the tests */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NVALS 4
static const char *names[NVALS] = {"train/loss", "train/accuracy", "lr", "grad_norm"};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* One accel run: seconds for `calls` log() calls + a flush (every byte handed to the kernel); deinit (which also
   fsyncs) is not timed. Leaves the file path in out_path. */
static double run_accel(accel *acc, const char *dir, int flags, int calls, char *out_path) {
    accel_track t;
    accel_track_desc td;
    accel_track_value v[NVALS];
    double t0, t1;
    int i, k;
    memset(&td, 0, sizeof td);
    td.log_with = flags;
    td.logging_dir = dir;
    if (accel_track_init(acc, &t, &td) != ACCEL_OK || accel_track_init_trackers(&t, "bench", NULL, 0) != ACCEL_OK) {
        fprintf(stderr, "bench_trackers: %s\n", accel_last_error(acc));
        exit(1);
    }
    for (k = 0; k < NVALS; ++k) v[k].name = names[k];
    t0 = now();
    for (i = 0; i < calls; ++i) {
        v[0].value = 2.5 / (1.0 + 0.001 * i);
        v[1].value = 0.5 + i * 1e-7;
        v[2].value = 3e-4 * (1.0 - (double)i / calls);
        v[3].value = 1.0 + (i % 17) * 0.0625;
        if (accel_track_log(&t, v, NVALS, i) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(acc)); exit(1); }
    }
    if (accel_track_flush(&t) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(acc)); exit(1); }
    t1 = now();
    if (accel_track_deinit(&t) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(acc)); exit(1); }
    strcpy(out_path, flags == ACCEL_TRACK_JSONL ? t.jsonl_file : t.event_file);
    return t1 - t0;
}

/* Writes the records/lines of `bytes` again, one fwrite per record (tfrecord) or fwrite+fflush per line. */
static double run_raw(const unsigned char *bytes, size_t n, const char *path, int jsonl) {
    FILE *f = fopen(path, "wb");
    size_t pos = 0;
    double t0, t1;
    if (!f) { perror(path); exit(1); }
    setvbuf(f, NULL, _IOFBF, 1 << 16);
    t0 = now();
    while (pos < n) {
        size_t len;
        if (jsonl) {
            const unsigned char *nl = (const unsigned char *)memchr(bytes + pos, '\n', n - pos);
            len = nl ? (size_t)(nl - (bytes + pos)) + 1 : n - pos;
        } else {
            uint64_t l = 0;
            int b;
            for (b = 7; b >= 0; --b) l = (l << 8) | bytes[pos + (size_t)b];
            len = (size_t)l + 16;
        }
        if (fwrite(bytes + pos, 1, len, f) != len) { perror("fwrite"); exit(1); }
        if (jsonl && fflush(f) != 0) { perror("fflush"); exit(1); }
        pos += len;
    }
    fflush(f);
    t1 = now();
    fsync(fileno(f));
    fclose(f);
    return t1 - t0;
}

/* tensorboard's own EventFileWriter, the same scalars; -1 when the package is missing. */
static double run_peer(const char *dir, int calls) {
    char cmd[4096];
    FILE *p;
    double rate = -1;
    snprintf(cmd, sizeof cmd,
             "python3 -c '\n"
             "import sys, time\n"
             "try:\n"
             "    from tensorboard.summary.writer.event_file_writer import EventFileWriter\n"
             "    from tensorboard.compat.proto import event_pb2, summary_pb2\n"
             "except Exception:\n"
             "    print(-1); sys.exit(0)\n"
             "names = [\"train/loss\", \"train/accuracy\", \"lr\", \"grad_norm\"]\n"
             "w = EventFileWriter(\"%s/peer\")\n"
             "n = %d\n"
             "t0 = time.perf_counter()\n"
             "for i in range(n):\n"
             "    vals = [2.5 / (1.0 + 0.001 * i), 0.5 + i * 1e-7, 3e-4 * (1.0 - i / n), 1.0 + (i %% 17) * 0.0625]\n"
             "    s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in zip(names, vals)])\n"
             "    w.add_event(event_pb2.Event(wall_time=time.time(), step=i, summary=s))\n"
             "w.close()\n"
             "print(n * 4 / (time.perf_counter() - t0))\n"
             "' 2>/dev/null",
             dir, calls);
    p = popen(cmd, "r");
    if (!p) return -1;
    if (fscanf(p, "%lf", &rate) != 1) rate = -1;
    pclose(p);
    return rate;
}

static void emit(const char *bench, const char *writer, int calls, double accel_rate, double ref_rate,
                 const char *ref_name, double goal) {
    printf("{\"bench\": \"%s\", \"params\": {\"writer\": \"%s\", \"calls\": %d, \"scalars_per_call\": %d}, "
           "\"unit\": \"scalars/s\", \"accel\": %.0f, \"reference\": %.0f, \"reference_name\": \"%s\", "
           "\"ratio\": %.3f, \"goal\": %.2f}\n",
           bench, writer, calls, NVALS, accel_rate, ref_rate, ref_name, accel_rate / ref_rate, goal);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 200000;
    int jcalls = calls / 2;
    int rep;
    char dir[256], path[ACCEL_TRACK_PATH_CAPACITY], raw_path[ACCEL_TRACK_PATH_CAPACITY + 8];
    const char *tmp = getenv("TMPDIR");
    double best_tb = 1e30, best_tb_raw = 1e30, best_jl = 1e30, best_jl_raw = 1e30, peer;
    accel acc;
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    snprintf(dir, sizeof dir, "%s/accel-trk-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    for (rep = 0; rep < 3; ++rep) { /* best of 3, accel and reference interleaved */
        unsigned char *bytes;
        size_t n = 0;
        double ta, tr;
        ta = run_accel(&acc, dir, ACCEL_TRACK_TENSORBOARD, calls, path);
        bytes = at_read_file(path, &n);
        if (!bytes) { perror(path); return 1; }
        snprintf(raw_path, sizeof raw_path, "%s.raw", path);
        tr = run_raw(bytes, n, raw_path, 0);
        free(bytes);
        unlink(path); unlink(raw_path);
        if (ta < best_tb) best_tb = ta;
        if (tr < best_tb_raw) best_tb_raw = tr;

        ta = run_accel(&acc, dir, ACCEL_TRACK_JSONL, jcalls, path);
        bytes = at_read_file(path, &n);
        if (!bytes) { perror(path); return 1; }
        snprintf(raw_path, sizeof raw_path, "%s.raw", path);
        tr = run_raw(bytes, n, raw_path, 1);
        free(bytes);
        unlink(path); unlink(raw_path);
        if (ta < best_jl) best_jl = ta;
        if (tr < best_jl_raw) best_jl_raw = tr;
    }
    emit("track_log", "tensorboard", calls, calls * (double)NVALS / best_tb, calls * (double)NVALS / best_tb_raw,
         "fwrite of the same records (64 KiB stdio buffer)", 0.25);
    emit("track_log", "jsonl", jcalls, jcalls * (double)NVALS / best_jl, jcalls * (double)NVALS / best_jl_raw,
         "fwrite+fflush of the same lines", 0.3);
    peer = run_peer(dir, calls / 4);
    if (peer > 0) {
        double ta = run_accel(&acc, dir, ACCEL_TRACK_TENSORBOARD, calls / 4, path);
        emit("track_log_vs_tensorboard_python", "tensorboard", calls / 4, (calls / 4) * (double)NVALS / ta, peer,
             "tensorboard EventFileWriter (Python)", 1.0);
    } else {
        fprintf(stderr, "bench_trackers: tensorboard Python package not importable; peer line skipped\n");
    }
    at_rm_rf(dir);
    accel_shutdown(&acc);
    return 0;
}
