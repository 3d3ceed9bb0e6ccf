/* accel_trackers.h across real processes: only the main process writes (exactly one event file and one
   metrics.jsonl for any number of ranks), init_trackers gives every rank the same answer through the core's
   agreement check (an unwritable logging dir on the main process → ACCEL_ERR_IO there, ACCEL_ERR_REMOTE carrying
   the main's message elsewhere; a bad argument on the last rank only → an error on every rank and no files left by
   the main process), and log() after deinit is an error on every rank, not a crash.
   usage: test_trackers_mpi [ok|unwritable|badarg] */
#include "accel.h"
#include "accel_trackers.h"
#include "accel_test.h"
#include "accel_test_fs.h"
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>


static int count_lines(const char *path) {
    FILE *f = fopen(path, "rb");
    int c, n = 0;
    if (!f) return -1;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static void quiet(void *user, accel_log_level level, const char *msg) {
    (void)user; (void)level; (void)msg;
}

#define NSTEPS 7

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    accel acc;
    accel_desc d;
    accel_track t;
    accel_track_desc td;
    accel_track_param cfg[2];
    accel_track_value v[2];
    char base[256];
    char logdir[512];
    int s, rank;
    int64_t failed;
    memset(&d, 0, sizeof d);
    d.log_fn = quiet;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "accel_init: %s\n", accel_last_error(&acc)); return 1; }
    rank = acc.process_index;
    at_context = mode;
    /* one temporary directory, made by rank 0 and broadcast (all ranks share this machine's /tmp) */
    memset(base, 0, sizeof base);
    if (rank == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(base, sizeof base, "%s/accel-trk-mpi-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(base)) base[0] = 0;
    }
    AT_EQ_INT(accel_host_broadcast(&acc, base, sizeof base, 0), ACCEL_OK);
    AT_CHECK(base[0] != 0);
    if (!strcmp(mode, "unwritable")) {
        if (rank == 0) {
            char file[300];
            FILE *f;
            snprintf(file, sizeof file, "%s/a_file", base);
            f = fopen(file, "w");
            if (f) fclose(f);
        }
        snprintf(logdir, sizeof logdir, "%s/a_file/logs", base);
    } else {
        snprintf(logdir, sizeof logdir, "%s/logs", base);
    }
    memset(&td, 0, sizeof td);
    td.log_with = ACCEL_TRACK_ALL;
    td.logging_dir = logdir;
    AT_EQ_INT(accel_track_init(&acc, &t, &td), ACCEL_OK);
    AT_EQ_INT(t.is_writer, rank == 0);
    cfg[0] = accel_track_param_int("num_processes", acc.num_processes);
    cfg[1] = accel_track_param_number("lr", 0.01);
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);

    if (!strcmp(mode, "unwritable")) {
        accel_result r = accel_track_init_trackers(&t, "mpi_run", cfg, 2);
        if (rank == 0) AT_EQ_INT(r, ACCEL_ERR_IO);
        else AT_EQ_INT(r, acc.num_processes > 1 ? ACCEL_ERR_REMOTE : ACCEL_ERR_IO);
        AT_CONTAINS(accel_last_error(&acc), "cannot create logging directory");
        if (rank != 0) AT_CONTAINS(accel_last_error(&acc), "rank 0 failed in init_trackers: cannot create logging");
        AT_CONTAINS(accel_last_error(&acc), "a_file\" exists and is not a directory");
        v[0] = accel_track_scalar("loss", 1.0);
        AT_EQ_INT(accel_track_log(&t, v, 1, 0), ACCEL_ERR_STATE); /* no crash on any rank */
        AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    } else if (!strcmp(mode, "badarg")) {
        /* only the last rank passes a bad project name: the main process has already created its files when it
           learns of the failure, and takes them back */
        int last = acc.num_processes - 1;
        accel_result r = accel_track_init_trackers(&t, rank == last ? "" : "mpi_run", cfg, 2);
        char run[600];
        if (rank == last) AT_EQ_INT(r, ACCEL_ERR_INVALID_ARGUMENT);
        else AT_EQ_INT(r, ACCEL_ERR_REMOTE);
        AT_CONTAINS(accel_last_error(&acc), "project_name is NULL, empty or not UTF-8");
        if (rank != last) {
            char want[64];
            snprintf(want, sizeof want, "rank %d failed in init_trackers", last);
            AT_CONTAINS(accel_last_error(&acc), want);
        }
        AT_EQ_INT(t.state, ACCEL_TRACK_STATE_READY);
        AT_EQ_STR(t.run_dir, "");
        AT_EQ_STR(t.event_file, "");
        AT_CHECK(t.impl == NULL);
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        snprintf(run, sizeof run, "%s/mpi_run", logdir);
        if (rank == 0) {
            DIR *dd = opendir(run);
            struct dirent *e;
            int n = 0;
            while (dd && (e = readdir(dd)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
            if (dd) closedir(dd);
            AT_EQ_INT(n, 0); /* no event file, metrics.jsonl or config.json left behind */
        }
        /* a retry with good arguments everywhere works */
        AT_EQ_INT(accel_track_init_trackers(&t, "mpi_run", cfg, 2), ACCEL_OK);
        AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
    } else {
        AT_EQ_INT(accel_track_init_trackers(&t, "mpi_run", cfg, 2), ACCEL_OK);
        for (s = 0; s < NSTEPS; ++s) {
            v[0] = accel_track_scalar("loss", 1.0 / (s + 1));
            v[1] = accel_track_scalar("rank_of_writer", (double)rank);
            AT_EQ_INT(accel_track_log(&t, v, 2, s), ACCEL_OK);
        }
        AT_EQ_INT(accel_track_deinit(&t), ACCEL_OK);
        AT_EQ_INT(accel_track_log(&t, v, 2, NSTEPS), ACCEL_ERR_STATE);
        AT_CONTAINS(accel_last_error(&acc), "after accel_track_deinit");
        AT_EQ_INT(t.logged, NSTEPS);
        if (rank != 0) {
            AT_EQ_STR(t.run_dir, "");
            AT_EQ_STR(t.event_file, "");
        }
        AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
        if (rank == 0) {
            char run[600], jl[700];
            DIR *dd;
            struct dirent *e;
            int n_events = 0, n_jsonl = 0, n_other = 0;
            snprintf(run, sizeof run, "%s/mpi_run", logdir);
            AT_EQ_STR(t.run_dir, run);
            dd = opendir(run);
            AT_CHECK(dd != NULL);
            while (dd && (e = readdir(dd)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                if (strstr(e->d_name, "tfevents")) n_events++;
                else if (!strcmp(e->d_name, "metrics.jsonl")) n_jsonl++;
                else if (strcmp(e->d_name, "config.json")) n_other++;
            }
            if (dd) closedir(dd);
            AT_EQ_INT(n_events, 1);
            AT_EQ_INT(n_jsonl, 1);
            AT_EQ_INT(n_other, 0);
            snprintf(jl, sizeof jl, "%s/metrics.jsonl", run);
            AT_EQ_INT(count_lines(jl), NSTEPS); /* the other ranks' log() calls wrote nothing */
            {
                /* and nothing appeared anywhere else under the base directory */
                DIR *b = opendir(logdir);
                int n = 0;
                while (b && (e = readdir(b)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
                if (b) closedir(b);
                AT_EQ_INT(n, 1);
            }
        }
    }
    /* every rank's verdict, so one failing rank fails the run */
    failed = at_failed;
    AT_EQ_INT(accel_host_allreduce_i64(&acc, &failed, 1, ACCEL_HOST_SUM), ACCEL_OK);
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    if (rank == 0) at_rm_rf(base);
    accel_shutdown(&acc);
    if (failed && !at_failed) { fprintf(stderr, "rank %d: another rank failed\n", rank); return 1; }
    {
        char name[64];
        snprintf(name, sizeof name, "trackers-mpi[%s rank %d]", mode, rank);
        return at_finish(name);
    }
}
