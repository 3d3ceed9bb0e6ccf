/* Preemption (accel.h: PREEMPTION; issue 29): accel_preemption_install and accel_should_stop.
   usage: test_preempt unit                      one process: argument checks, chaining to the program's handlers
                                                 (plain and SA_SIGINFO), SIG_DFL / SIG_IGN / the program's handlers
                                                 restored at accel_shutdown, a second Accelerator refused, a fresh
                                                 install not stopped by an earlier run's signal
          test_preempt none|before|during|fr-first|fr-after   under mpirun (2 or 3 ranks):
            none      no signal: 40 step boundaries never stop; accel_set_trigger does not stop, a stop does not fire
                      the trigger
            before    the last rank raises SIGUSR1 before step 4's work: every rank stops at step 4 with SIGUSR1
            during    rank 0 sends the last rank SIGTERM while that rank is blocked in step 4's barrier: the barrier
                      completes, the program's own handler (chained) ran, every rank stops at step 4 with SIGTERM
            fr-first / fr-after   an accel_coll context (the flight recorder) created before / after the install:
                      SIGUSR1 to the last rank dumps its flight recorder AND stops every rank; after accel_shutdown
                      SIGUSR1's disposition is the one the program started with
   The expected values are written here from the scenario (the step and the signal), never read from accel. */
#include "accel.h"
#include "accel_collectives.h"
#include "accel_test.h"
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t g_user_usr1, g_user_term, g_user_term_signo;
static void user_usr1(int s) { (void)s; g_user_usr1++; }
static void user_term_info(int s, siginfo_t *info, void *uc) {
    (void)uc;
    g_user_term++;
    g_user_term_signo = info ? info->si_signo : -s;
}

static void set_handler(int sig, void (*h)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    AT_EQ_INT(sigaction(sig, &sa, NULL), 0);
}
static void set_handler_info(int sig, void (*h)(int, siginfo_t *, void *)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = h;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    AT_EQ_INT(sigaction(sig, &sa, NULL), 0);
}
/* Is sig's disposition exactly `want` (the handler and the SA_SIGINFO flag)? */
static int same_disposition(int sig, const struct sigaction *want) {
    struct sigaction cur;
    if (sigaction(sig, NULL, &cur) != 0) return 0;
    if ((cur.sa_flags & SA_SIGINFO) != (want->sa_flags & SA_SIGINFO)) return 0;
    if (cur.sa_flags & SA_SIGINFO) return cur.sa_sigaction == want->sa_sigaction;
    return cur.sa_handler == want->sa_handler;
}
static struct sigaction now_disposition(int sig) {
    struct sigaction cur;
    memset(&cur, 0, sizeof cur);
    (void)sigaction(sig, NULL, &cur);
    return cur;
}

static int g_warns;
static char g_last_warn[512];
static void log_fn(void *u, accel_log_level level, const char *msg) {
    (void)u;
    if (level == ACCEL_LOG_WARN) { g_warns++; snprintf(g_last_warn, sizeof g_last_warn, "%s", msg); }
}

static accel_result init1(accel *acc) {
    accel_desc d;
    memset(&d, 0, sizeof d);
    d.no_mpi = 1;
    d.cpu = 1;
    d.log_fn = log_fn;
    return accel_init(acc, &d);
}

static void unit(void) {
    accel acc, acc2, zero;
    int stop = -1, i;
    struct sigaction want_usr1, want_term, before_usr1, before_term;

    /* 1. arguments and state: nothing is installed by a refused call */
    memset(&zero, 0, sizeof zero);
    before_term = now_disposition(SIGTERM);
    AT_EQ_INT(accel_preemption_install(NULL, ACCEL_PREEMPT_SIGNALS), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_preemption_install(&zero, ACCEL_PREEMPT_SIGNALS), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&zero), "not initialized");
    AT_EQ_INT(accel_should_stop(&zero, &stop), ACCEL_ERR_STATE);
    AT_CHECK(same_disposition(SIGTERM, &before_term));
    AT_EQ_INT(init1(&acc), ACCEL_OK);
    AT_EQ_INT(accel_preemption_install(&acc, 0), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_preemption_install(&acc, 4), ACCEL_ERR_INVALID_ARGUMENT);
    AT_EQ_INT(accel_preemption_install(&acc, -1), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CONTAINS(accel_last_error(&acc), "ACCEL_PREEMPT_SIGTERM");
    AT_EQ_INT(accel_should_stop(&acc, NULL), ACCEL_ERR_INVALID_ARGUMENT);
    AT_CHECK(same_disposition(SIGTERM, &before_term));
    accel_shutdown(&acc);

    /* 2. the program's own handlers (SIGUSR1 plain, SIGTERM SA_SIGINFO): chained, and restored at shutdown */
    set_handler(SIGUSR1, user_usr1);
    set_handler_info(SIGTERM, user_term_info);
    want_usr1 = now_disposition(SIGUSR1);
    want_term = now_disposition(SIGTERM);
    AT_EQ_INT(init1(&acc), ACCEL_OK);
    for (i = 0; i < 50; ++i) { /* unsignalled: never stops */
        stop = -1;
        AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
        if (stop != 0) break;
    }
    AT_EQ_INT(stop, 0);
    AT_EQ_INT(accel_preemption_install(&acc, ACCEL_PREEMPT_SIGNALS), ACCEL_OK);
    AT_CHECK(!same_disposition(SIGUSR1, &want_usr1) && !same_disposition(SIGTERM, &want_term)); /* accel's now */
    AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
    AT_EQ_INT(stop, 0);
    AT_EQ_INT(raise(SIGUSR1), 0);
    AT_EQ_INT(g_user_usr1, 1); /* chained */
    AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
    AT_EQ_INT(stop, SIGUSR1);
    AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK); /* sticky */
    AT_EQ_INT(stop, SIGUSR1);
    AT_EQ_INT(raise(SIGTERM), 0); /* the process is alive: accel's handler replaced the action */
    AT_EQ_INT(g_user_term, 1);
    AT_EQ_INT(g_user_term_signo, SIGTERM); /* the SA_SIGINFO handler got its siginfo */
    AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
    AT_EQ_INT(stop, SIGTERM);
    /* a second Accelerator may not take the process's signals while the first holds them */
    AT_EQ_INT(init1(&acc2), ACCEL_OK);
    AT_EQ_INT(accel_preemption_install(&acc2, ACCEL_PREEMPT_SIGTERM), ACCEL_ERR_STATE);
    AT_CONTAINS(accel_last_error(&acc2), "another Accelerator");
    accel_shutdown(&acc2); /* not the owner: nothing is restored */
    AT_CHECK(!same_disposition(SIGTERM, &want_term));
    accel_shutdown(&acc);
    AT_CHECK(same_disposition(SIGUSR1, &want_usr1));
    AT_CHECK(same_disposition(SIGTERM, &want_term));
    AT_EQ_INT(raise(SIGUSR1), 0); /* straight to the program's handler again */
    AT_EQ_INT(g_user_usr1, 2);

    /* 3. SIG_DFL restored; only the chosen signal is taken; a new run does not inherit the old run's stop */
    set_handler(SIGUSR1, SIG_DFL);
    set_handler(SIGTERM, SIG_DFL);
    before_usr1 = now_disposition(SIGUSR1);
    before_term = now_disposition(SIGTERM);
    AT_EQ_INT(init1(&acc), ACCEL_OK);
    AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
    AT_EQ_INT(stop, 0); /* not installed yet: the previous run's SIGTERM is not this one's */
    AT_EQ_INT(accel_preemption_install(&acc, ACCEL_PREEMPT_SIGTERM), ACCEL_OK);
    AT_CHECK(same_disposition(SIGUSR1, &before_usr1)); /* not chosen: left alone */
    AT_CHECK(!same_disposition(SIGTERM, &before_term));
    AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
    AT_EQ_INT(stop, 0);
    AT_EQ_INT(raise(SIGTERM), 0);
    AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
    AT_EQ_INT(stop, SIGTERM);
    AT_EQ_INT(accel_preemption_install(&acc, ACCEL_PREEMPT_SIGUSR1), ACCEL_OK); /* the same Accelerator adds one */
    AT_CHECK(!same_disposition(SIGUSR1, &before_usr1));
    accel_shutdown(&acc);
    AT_CHECK(same_disposition(SIGUSR1, &before_usr1));
    AT_CHECK(same_disposition(SIGTERM, &before_term));

    /* 4. SIG_IGN restored; a handler installed over accel's is left in place, with a WARN */
    set_handler(SIGUSR1, SIG_IGN);
    before_usr1 = now_disposition(SIGUSR1);
    AT_EQ_INT(init1(&acc), ACCEL_OK);
    AT_EQ_INT(accel_preemption_install(&acc, ACCEL_PREEMPT_SIGNALS), ACCEL_OK);
    AT_EQ_INT(raise(SIGUSR1), 0);
    AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
    AT_EQ_INT(stop, SIGUSR1);
    set_handler_info(SIGTERM, user_term_info); /* over accel's */
    want_term = now_disposition(SIGTERM);
    g_warns = 0;
    accel_shutdown(&acc);
    AT_CHECK(same_disposition(SIGUSR1, &before_usr1));
    AT_CHECK(same_disposition(SIGTERM, &want_term));
    AT_EQ_INT(g_warns, 1);
    AT_CONTAINS(g_last_warn, "SIGTERM: its handler was replaced");
    set_handler(SIGTERM, SIG_DFL);
    set_handler(SIGUSR1, SIG_DFL);
}

/* ------------------------------------------------------------------------------------------------ under mpirun */
static accel_result step_work(accel *acc, int step) { /* a step's collective: every rank's step number summed */
    int64_t v = step;
    accel_result r = accel_host_allreduce_i64(acc, &v, 1, ACCEL_HOST_SUM);
    if (r == ACCEL_OK && v != (int64_t)step * acc->num_processes) r = ACCEL_ERR_MISMATCH;
    return r;
}

static void sleep_ms(int ms) {
    double until = accel_now() + ms / 1000.0;
    while (accel_now() < until) usleep(1000); /* a signal cuts usleep short: sleep the rest */
}

static void mpi_mode(const char *mode) {
    accel acc;
    accel_desc d;
    accel_coll *coll = NULL;
    int stop = 0, step, stop_step = -1, last, fr = !strcmp(mode, "fr-first") || !strcmp(mode, "fr-after");
    int64_t *pids;
    char dir[256], path[300];
    struct sigaction start_usr1, start_term;
    struct stat st;
    int64_t me = (int64_t)getpid(), v;

    if (!strcmp(mode, "during")) set_handler_info(SIGTERM, user_term_info); /* the program's own, before accel's */
    snprintf(dir, sizeof dir, "/tmp/accel_preempt_fr_%d", (int)getppid());
    if (fr) setenv("ACCEL_FLIGHT_DIR", dir, 1);
    memset(&d, 0, sizeof d);
    d.cpu = 1;
    d.collective_timeout_ms = 60000;
    AT_EQ_INT(accel_init(&acc, &d), ACCEL_OK);
    /* the dispositions accel must restore: after accel_init, since MPI_Init may install its own (MPICH's SIGUSR1
       handler for process-failure notices) and MPI_Finalize leaves it in place */
    start_usr1 = now_disposition(SIGUSR1);
    start_term = now_disposition(SIGTERM);
    AT_CHECK(acc.num_processes >= 2);
    if (acc.num_processes < 2) return;
    last = acc.num_processes - 1;
    pids = (int64_t *)calloc((size_t)acc.num_processes, sizeof *pids);
    AT_EQ_INT(accel_host_allgather(&acc, &me, pids, sizeof me), ACCEL_OK);
    if (fr && acc.is_main_process) {
        mkdir(dir, 0755);
        for (step = 0; step < acc.num_processes; ++step) {
            snprintf(path, sizeof path, "%s/rank%d.json", dir, step);
            unlink(path);
        }
    }
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    if (!strcmp(mode, "fr-first")) AT_EQ_INT(accel_coll_create(&acc, NULL, &coll), ACCEL_OK);
    AT_EQ_INT(accel_preemption_install(&acc, ACCEL_PREEMPT_SIGNALS), ACCEL_OK);
    if (!strcmp(mode, "fr-after")) AT_EQ_INT(accel_coll_create(&acc, NULL, &coll), ACCEL_OK);

    for (step = 1; step <= 40 && stop_step < 0; ++step) {
        if (!strcmp(mode, "before") && step == 4 && acc.process_index == last) AT_EQ_INT(raise(SIGUSR1), 0);
        AT_EQ_INT(step_work(&acc, step), ACCEL_OK);
        if (step == 4 && (!strcmp(mode, "during") || fr)) {
            /* the last rank waits in the barrier while rank 0 signals it; rank 0 joins 200 ms later */
            if (acc.process_index == 0) {
                AT_EQ_INT(kill((pid_t)pids[last], fr ? SIGUSR1 : SIGTERM), 0);
                sleep_ms(200);
            }
            AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
            if (acc.process_index == last && !fr) AT_EQ_INT(g_user_term, 1); /* delivered, chained */
        }
        if (!strcmp(mode, "none") && step == 7) { /* the trigger and the stop flag are separate */
            int fired = 0;
            if (acc.process_index == last) accel_set_trigger(&acc);
            AT_EQ_INT(accel_check_trigger(&acc, &fired), ACCEL_OK);
            AT_EQ_INT(fired, 1);
        }
        AT_EQ_INT(accel_should_stop(&acc, &stop), ACCEL_OK);
        if (stop) stop_step = step;
    }
    if (!strcmp(mode, "none")) {
        AT_EQ_INT(stop_step, -1);
    } else {
        AT_EQ_INT(stop_step, 4);
        AT_EQ_INT(stop, !strcmp(mode, "during") ? SIGTERM : SIGUSR1);
        if (!strcmp(mode, "before") || fr) { /* a stop does not fire the trigger */
            int fired = 1;
            AT_EQ_INT(accel_check_trigger(&acc, &fired), ACCEL_OK);
            AT_EQ_INT(fired, 0);
        }
    }
    /* every rank saw the same outcome (the check above runs on each; this makes a disagreement visible on rank 0) */
    v = stop_step;
    AT_EQ_INT(accel_host_allreduce_i64(&acc, &v, 1, ACCEL_HOST_MAX), ACCEL_OK);
    AT_EQ_INT(v, stop_step);
    v = stop_step;
    AT_EQ_INT(accel_host_allreduce_i64(&acc, &v, 1, ACCEL_HOST_MIN), ACCEL_OK);
    AT_EQ_INT(v, stop_step);
    if (fr) { /* the signalled rank dumped its flight recorder (the others did not) */
        /* also when the recorder came first under MPICH, whose MPI_Init (called by accel_init) installs a SIGUSR1
           handler: that one is the MPI library's, not the program's, so the recorder takes the signal and chains */
        snprintf(path, sizeof path, "%s/rank%d.json", dir, acc.process_index);
        AT_EQ_INT(stat(path, &st) == 0 && st.st_size > 0, acc.process_index == last);
    }
    accel_coll_destroy(coll);
    AT_EQ_INT(accel_wait_for_everyone(&acc), ACCEL_OK);
    free(pids);
    accel_shutdown(&acc);
    AT_CHECK(same_disposition(SIGUSR1, &start_usr1)); /* restored: the flight recorder's use went too */
    AT_CHECK(same_disposition(SIGTERM, &start_term));
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "unit";
    if (!strcmp(mode, "unit")) unit();
    else if (!strcmp(mode, "none") || !strcmp(mode, "before") || !strcmp(mode, "during") ||
             !strcmp(mode, "fr-first") || !strcmp(mode, "fr-after"))
        mpi_mode(mode);
    else { fprintf(stderr, "usage: test_preempt unit|none|before|during|fr-first|fr-after\n"); return 2; }
    return at_finish("preempt");
}
