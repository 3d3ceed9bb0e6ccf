/* `accel env`: what `accelerate env` reports, for accel. Under mpirun each rank prints its own block. */
#include "accel.h"
#include "cli.h"
#include <stdio.h>
#include <string.h>
#ifdef ACCEL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef ACCEL_WITH_NCCL
#include <nccl.h>
#endif
#ifdef ACCEL_WITH_MPI
#include <mpi.h>
#endif

static const char *compiler(void) {
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return "unknown";
#endif
}

int cli_env(int argc, char **argv) {
    accel acc;
    accel_desc d;
    accel_result r;
    char buf[4096];
    int len = 0;
    char devname[32] = "cpu";
    (void)argv;
    if (argc > 1) { fprintf(stderr, "usage: accel env\n"); return 2; }
    memset(&d, 0, sizeof d);
    r = accel_init(&acc, &d);
    len += snprintf(buf + len, sizeof buf - (size_t)len, "- accel version: %s\n- compiler: %s\n", accel_version_string(), compiler());
#ifdef ACCEL_WITH_CUDA
    {
        int rt = 0, drv = 0, n = 0;
        cudaRuntimeGetVersion(&rt);
        cudaDriverGetVersion(&drv);
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        (void)cudaGetLastError();
        len += snprintf(buf + len, sizeof buf - (size_t)len, "- CUDA runtime: %d.%d\n- CUDA driver: %s\n", rt / 1000, (rt % 1000) / 10,
                        drv ? "present" : "none");
        if (n > 0) {
            struct cudaDeviceProp p;
            cudaGetDeviceProperties(&p, 0);
            len += snprintf(buf + len, sizeof buf - (size_t)len, "- CUDA devices: %d (%s)\n", n, p.name);
        } else {
            len += snprintf(buf + len, sizeof buf - (size_t)len, "- CUDA devices: no CUDA device\n");
        }
    }
#else
    len += snprintf(buf + len, sizeof buf - (size_t)len, "- CUDA: not compiled in (no CUDA device used)\n");
#endif
#ifdef ACCEL_WITH_NCCL
    {
        int v = 0;
        ncclGetVersion(&v);
        len += snprintf(buf + len, sizeof buf - (size_t)len, "- NCCL: %d.%d.%d\n", v / 10000, (v % 10000) / 100, v % 100);
    }
#else
    len += snprintf(buf + len, sizeof buf - (size_t)len, "- NCCL: not compiled in\n");
#endif
#ifdef ACCEL_WITH_MPI
    {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int n = 0;
        char *nl;
        MPI_Get_library_version(lib, &n);
        nl = strchr(lib, '\n');
        if (nl) *nl = 0;
        len += snprintf(buf + len, sizeof buf - (size_t)len, "- MPI: %.200s\n", lib);
    }
#else
    len += snprintf(buf + len, sizeof buf - (size_t)len, "- MPI: not compiled in\n");
#endif
    if (r != ACCEL_OK) {
        printf("%s- accel_init failed: %s\n", buf, accel_last_error(&acc));
        accel_shutdown(&acc);
        return 1;
    }
    if (acc.device >= 0) snprintf(devname, sizeof devname, "cuda:%d", acc.device);
    len += snprintf(buf + len, sizeof buf - (size_t)len,
                    "- launcher: %s\n- host process group: %s\n- process: %d of %d (local %d of %d)%s\n"
                    "- distributed_type: %s\n- device: %s\n"
                    "- mixed_precision: %s\n- gradient_accumulation_steps: %d\n- debug: %s\n- cpu: %s\n"
                    "- master: %s:%d\n- collective_timeout_ms: %d\n",
                    /* accel launch gives torchrun's variables but no TORCHELASTIC_RUN_ID (it drops an inherited one) */
                    acc.launcher == ACCEL_LAUNCHER_TORCHRUN && !getenv("TORCHELASTIC_RUN_ID") && getenv("ACCEL_RUN_ID")
                        ? "accel launch (torchrun's variables)" : accel_launcher_name(acc.launcher),
                    accel_host_group_name(&acc), acc.process_index, acc.num_processes, acc.local_process_index,
                    acc.local_num_processes, acc.is_main_process ? " main" : "",
                    accel_distributed_type_name(acc.distributed_type), devname, accel_precision_name(acc.mixed_precision),
                    acc.gradient_accumulation_steps, acc.debug ? "yes" : "no", acc.desc.cpu ? "yes" : "no",
                    acc.master_addr[0] ? acc.master_addr : "(unset)", acc.master_port, acc.desc.collective_timeout_ms);
    /* print rank by rank so blocks don't interleave */
    {
        int i;
        for (i = 0; i < acc.num_processes; ++i) {
            if (i == acc.process_index) {
                printf("[rank %d]\n%s", acc.process_index, buf);
                fflush(stdout);
            }
            if (strcmp(accel_host_group_name(&acc), "none") != 0) accel_wait_for_everyone(&acc);
        }
    }
    accel_shutdown(&acc);
    return 0;
}
