// gpushare hardware check: the CUDA client a share job's task would run.
//
// Compiled with nvcc on the GPU node by gpushare-hw-check, run as a job's
// user with exactly the environment the SPANK plugin gives its tasks.
//
//   client <alloc_mib> <busy_ms> <rounds>
//   client bench <blocks> <launches> <rounds>     (make bench-gpu: see bench())
//
// (A share's steady load for the per-share use check is not here: that
// is `gpu-mps --cuda-probe LIBRARY hold`, the driver API, no nvcc.)
//
// Prints one JSON line {"event":"ready",...} once CUDA is initialised (so
// the check can look at the process while it is a client), then one
// {"event":"result",...} line: whether the context goes through MPS, the
// result of cudaMalloc of <alloc_mib> MiB, and the time of one compute-bound
// kernel of <rounds> dependent FMAs per thread in a fixed grid. It then keeps
// the GPU busy with the same kernel for <busy_ms> ms (the other checks run
// beside it), prints {"event":"done",...} with how that ended, and exits 0;
// any CUDA error ends it with exit 1 after its line.

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// The kernel's grid: about four waves of 256-thread blocks on a whole
// 132-SM GPU, sixteen on a quarter of it.
#define BLOCKS 4096

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// A dependent chain of FMAs per thread: bound by the SMs it is given, not
// by memory, so its time follows the thread percentage.
__global__ void spin(float *out, int rounds) {
    float a = threadIdx.x * 1e-3f;
    for (int i = 0; i < rounds; i++) {
        a = fmaf(a, 0.9999f, 0.0001f);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}

// JSON string of a CUDA error (its name and text have no quotes).
static const char *err(cudaError_t e) { return cudaGetErrorString(e); }

// CUDA's MPS attribute of the current context: 1 through MPS, 0 not, -1
// unknown (CUDA before 12.4, or built with -DNO_MPS_ATTRIBUTE).
static int mps_attribute(void) {
    int mps = -1;
#if defined(CUDA_VERSION) && CUDA_VERSION >= 12040 && !defined(NO_MPS_ATTRIBUTE)
    CUdevice dev;
    if (cuCtxGetDevice(&dev) == CUDA_SUCCESS) {
        cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev);
    }
#endif
    return mps;
}

// `client bench <blocks> <launches> <rounds>`: one job of make bench-gpu, a
// small job that keeps <blocks> SMs busy: <launches> kernels of <blocks>
// blocks, one after another. Prints {"event":"bench",...} (CUDA init and
// the kernels' wall time) and {"event":"done",...}.
static int bench(int blocks, int launches, int rounds) {
    double t0 = now_ms();
    cudaError_t e = cudaFree(0);
    double init_ms = now_ms() - t0;
    int sms = 0;
    float *out = NULL;
    double work_ms = -1;
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (e == cudaSuccess) e = cudaMalloc(&out, (size_t)blocks * 256 * sizeof(float));
    if (e == cudaSuccess) {
        double w0 = now_ms();
        for (int i = 0; i < launches; i++) spin<<<blocks, 256>>>(out, rounds);
        e = cudaDeviceSynchronize();
        work_ms = now_ms() - w0;
    }
    char kernel[256] = "ok";
    if (e != cudaSuccess) snprintf(kernel, sizeof kernel, "%s: %s", cudaGetErrorName(e), err(e));
    printf("{\"event\":\"bench\",\"pid\":%d,\"init_ms\":%.1f,\"mps_enabled\":%d,\"sms\":%d,"
           "\"work_ms\":%.1f,\"kernel\":\"%s\"}\n",
           (int)getpid(), init_ms, mps_attribute(), sms, work_ms, kernel);
    printf("{\"event\":\"done\",\"pid\":%d,\"busy\":\"%s\"}\n", (int)getpid(), kernel);
    fflush(stdout);
    return e == cudaSuccess ? 0 : 1;
}

// Initialises CUDA (cudaFree(0)), its time in *init_ms; on failure prints
// the {"event":"result",...} line saying why and returns 0.
static int init_cuda(double *init_ms) {
    double t0 = now_ms();
    cudaError_t e = cudaFree(0);
    *init_ms = now_ms() - t0;
    if (e != cudaSuccess) {
        printf("{\"event\":\"result\",\"pid\":%d,\"init_ms\":%.1f,\"init\":\"%s: %s\"}\n",
               (int)getpid(), *init_ms, cudaGetErrorName(e), err(e));
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "bench") == 0) {
        return bench(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    }
    if (argc != 4) {
        fprintf(stderr, "usage: client <alloc_mib> <busy_ms> <rounds>\n"
                        "       client bench <blocks> <launches> <rounds>\n");
        return 2;
    }
    long alloc_mib = atol(argv[1]);
    long busy_ms = atol(argv[2]);
    int rounds = atoi(argv[3]);
    double init_ms;
    if (!init_cuda(&init_ms)) return 1;
    int mps = mps_attribute();
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    printf("{\"event\":\"ready\",\"pid\":%d,\"init_ms\":%.1f}\n", (int)getpid(), init_ms);
    fflush(stdout);

    char alloc[256] = "ok";
    if (alloc_mib > 0) {
        void *p = NULL;
        cudaError_t a = cudaMalloc(&p, (size_t)alloc_mib << 20);
        if (a == cudaSuccess) {
            // Touch it: an allocation the limit allows must also be usable.
            a = cudaMemset(p, 1, (size_t)alloc_mib << 20);
            if (a == cudaSuccess) a = cudaDeviceSynchronize();
            cudaFree(p);
        }
        if (a != cudaSuccess) {
            snprintf(alloc, sizeof alloc, "%s: %s", cudaGetErrorName(a), err(a));
            cudaGetLastError();
        }
    }

    // A fixed amount of work, whatever number of SMs CUDA reports: under
    // MPS it reports the share's part of them, and a grid sized by it would
    // shrink with the share and take the same time.
    int blocks = BLOCKS, threads = 256;
    float *out = NULL;
    char kernel[256] = "ok";
    float kernel_ms = -1;
    cudaError_t k = cudaMalloc(&out, (size_t)blocks * threads * sizeof(float));
    cudaEvent_t start, stop;
    if (k == cudaSuccess) k = cudaEventCreate(&start);
    if (k == cudaSuccess) k = cudaEventCreate(&stop);
    if (k == cudaSuccess) {
        spin<<<blocks, threads>>>(out, 1000);  // warm-up
        cudaEventRecord(start);
        spin<<<blocks, threads>>>(out, rounds);
        cudaEventRecord(stop);
        k = cudaEventSynchronize(stop);
        if (k == cudaSuccess) k = cudaEventElapsedTime(&kernel_ms, start, stop);
    }
    if (k != cudaSuccess) snprintf(kernel, sizeof kernel, "%s: %s", cudaGetErrorName(k), err(k));
    printf("{\"event\":\"result\",\"pid\":%d,\"init_ms\":%.1f,\"init\":\"ok\",\"mps_enabled\":%d,"
           "\"sms\":%d,\"alloc_mib\":%ld,\"alloc\":\"%s\",\"kernel_ms\":%.2f,\"kernel\":\"%s\"}\n",
           (int)getpid(), init_ms, mps, sms, alloc_mib, alloc, kernel_ms, kernel);
    fflush(stdout);

    double until = now_ms() + busy_ms;
    while (k == cudaSuccess && now_ms() < until) {
        spin<<<blocks, threads>>>(out, rounds / 4 + 1);
        k = cudaDeviceSynchronize();
    }
    char busy[256] = "ok";
    if (k != cudaSuccess) snprintf(busy, sizeof busy, "%s: %s", cudaGetErrorName(k), err(k));
    printf("{\"event\":\"done\",\"pid\":%d,\"busy\":\"%s\"}\n", (int)getpid(), busy);
    fflush(stdout);
    return k == cudaSuccess ? 0 : 1;
}
