/* accel_profile.h on a CUDA device (exit 77 without one): ranges record CUDA events on acc's stream and their device
   times are read without synchronizing inside the step.
     - a range around a kernel that spins ~2 ms on the device has a device time of about 2 ms, non-negative, while
       its host time (the launch) is far shorter;
     - accel_prof_step returns while a 200 ms kernel is still running (it only queries events);
     - every device event in the trace file has ts >= 0 and dur >= 0, nested like the host ranges, and device times
       follow stream order;
     - after destroy, an enabled profiler without device timing (no_device_timing) reports device -1. */
#include "accel.h"
#include "accel_profile.h"
#include "accel_test.h"
#include "accel_test_gpu.h"
#include "accel_test_fs.h"
#include <cuda_runtime_api.h>
#include <unistd.h>

static __global__ void spin_kernel(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static void quiet(void *user, accel_log_level level, const char *msg) {
    (void)user; (void)level; (void)msg;
}

int main(void) {
    int count = 0, k, clock_khz = 0;
    accel acc;
    accel_desc d;
    accel_prof *p = NULL;
    accel_prof_desc pd;
    accel_prof_stats fwd, opt, st;
    char dir[256];
    long long ms_cycles;
    AT_SKIP_WITHOUT_GPU(count);
    memset(&d, 0, sizeof d);
    d.log_fn = quiet;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    AT_CHECK(acc.device >= 0);
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, acc.device);
    ms_cycles = (long long)(clock_khz > 0 ? clock_khz : 1500000); /* cycles per millisecond */
    snprintf(dir, sizeof dir, "/tmp/accel_prof_gpu_%d", (int)getpid());
    memset(&pd, 0, sizeof pd);
    pd.trace_dir = dir;
    AT_EQ_INT(accel_prof_create(&acc, &pd, &p), ACCEL_OK);
    if (!p) return at_finish("profile_gpu");
    AT_EQ_INT(p->device_timing, 1);
    for (k = 0; k < 5; ++k) {
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        spin_kernel<<<1, 1, 0, (cudaStream_t)acc.stream>>>(2 * ms_cycles);
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_BACKWARD) == ACCEL_OK); /* nested, on the device as on the host */
        spin_kernel<<<1, 1, 0, (cudaStream_t)acc.stream>>>(ms_cycles);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_BACKWARD) == ACCEL_OK);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_OPTIMIZER) == ACCEL_OK);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_OPTIMIZER) == ACCEL_OK); /* empty on the device: ~0 */
        AT_CHECK(accel_prof_step(p) == ACCEL_OK);
    }
    AT_CHECK(cudaGetLastError() == cudaSuccess);
    {   /* step() does not wait for the device */
        double t0, t1;
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        spin_kernel<<<1, 1, 0, (cudaStream_t)acc.stream>>>(200 * ms_cycles);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        t0 = accel_now();
        AT_CHECK(accel_prof_step(p) == ACCEL_OK);
        t1 = accel_now();
        AT_CHECK_MSG(t1 - t0 < 0.05, "accel_prof_step waited for the device");
        AT_CHECK(cudaStreamQuery((cudaStream_t)acc.stream) == cudaErrorNotReady); /* still running */
    }
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_FORWARD, &fwd), ACCEL_OK);
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_OPTIMIZER, &opt), ACCEL_OK);
    AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_STEP, &st), ACCEL_OK);
    AT_EQ_INT(fwd.steps, 6);
    /* 5 steps of ~3 ms and one of ~200 ms on the device; the host only launched them */
    AT_CHECK_MSG(fwd.device_total_ms > 0.8 * (5 * 3 + 200) && fwd.device_total_ms < 2.0 * (5 * 3 + 200),
                 "forward's device time is not the kernels' time");
    AT_CHECK(opt.device_mean_ms >= 0 && opt.device_mean_ms < 0.5);
    AT_NEAR(st.device_mean_ms, -1.0, 0);
    printf("forward: host mean %.3f ms, device mean %.3f ms\n", fwd.mean_ms, fwd.device_mean_ms);
    AT_EQ_INT(accel_prof_write_trace(p), ACCEL_OK);
    {
        size_t n;
        char *buf = (char *)at_read_file(p->trace_file, &n);
        AT_CHECK(buf != NULL);
        if (buf) {
            const char *q = buf;
            int dev = 0, negative = 0;
            double last = -1;
            buf[n] = 0;
            while ((q = strstr(q, "\"cat\":\"device\"")) != NULL) {
                double ts = -1, dur = -1;
                const char *t = strstr(q, "\"ts\":"), *u = strstr(q, "\"dur\":");
                if (t) ts = atof(t + 5);
                if (u) dur = atof(u + 6);
                if (ts < 0 || dur < 0 || ts < last) negative++;
                last = ts;
                dev++;
                q++;
            }
            AT_EQ_INT(dev, 6 + 5 + 5);       /* forward ×6, backward ×5, optimizer ×5 */
            AT_EQ_INT(negative, 0);
            AT_CONTAINS(buf, "\"name\":\"cuda stream\"");
            free(buf);
        }
    }
    accel_prof_destroy(p);
    pd.no_device_timing = 1;
    AT_EQ_INT(accel_prof_create(&acc, &pd, &p), ACCEL_OK);
    if (p) {
        AT_EQ_INT(p->device_timing, 0);
        AT_CHECK(accel_prof_begin(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        AT_CHECK(accel_prof_end(p, ACCEL_PROF_FORWARD) == ACCEL_OK);
        AT_CHECK(accel_prof_step(p) == ACCEL_OK);
        AT_EQ_INT(accel_prof_phase_stats(p, ACCEL_PROF_FORWARD, &fwd), ACCEL_OK);
        AT_NEAR(fwd.device_mean_ms, -1.0, 0);
        accel_prof_destroy(p);
    }
    at_rm_rf(dir);
    accel_shutdown(&acc);
    return at_finish("profile_gpu");
}
