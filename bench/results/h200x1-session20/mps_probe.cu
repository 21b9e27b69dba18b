// MPS first-use probe: which first-time CUDA operation of a process waits while another MPS client's
// kernel spins on the GPU.  ./mps_probe spin SECONDS BLOCKS   |   ./mps_probe probe LABEL
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

__device__ unsigned long long gtime() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__global__ void spin(unsigned long long ns) { unsigned long long t0 = gtime(); while (gtime() - t0 < ns) {} }
__global__ void ka(float *p) { if (p) p[threadIdx.x] += 1.0f; }
__global__ void kb(float *p) { if (p) p[threadIdx.x] *= 2.0f; }

static double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
#define T(name, stmt) do { double t0 = now_us(); stmt; cudaError_t e = cudaDeviceSynchronize(); \
  printf("%-10s %-28s %10.1f us %s\n", label, name, now_us() - t0, e ? cudaGetErrorString(e) : ""); fflush(stdout); } while (0)

int main(int argc, char **argv) {
  if (argc >= 4 && !strcmp(argv[1], "spin")) {
    cudaFree(0);
    double s = atof(argv[2]); int blocks = atoi(argv[3]);
    int carve = argc > 4 ? atoi(argv[4]) : -1;
    if (carve >= 0) cudaFuncSetAttribute(spin, cudaFuncAttributePreferredSharedMemoryCarveout, carve);
    printf("spinner: %d blocks for %.1f s, carveout %d\n", blocks, s, carve); fflush(stdout);
    spin<<<blocks, 128>>>((unsigned long long)(s * 1e9));
    cudaError_t e = cudaDeviceSynchronize();
    printf("spinner: done %s\n", cudaGetErrorString(e));
    return 0;
  }
  const char *label = argc > 2 ? argv[2] : "probe";
  if (!strcmp(argv[1], "probe2")) {  // warm first, then (after the spinner started) time the same again
    float *q; cudaMalloc(&q, 4096); cublasHandle_t h; cublasCreate(&h);
    const int M = 16, N = 1024, K = 4096; __nv_bfloat16 *A, *B, *C; float one = 1.f, zero = 0.f;
    cudaMalloc(&A, 2 * M * K); cudaMalloc(&B, 2 * K * N); cudaMalloc(&C, 2 * M * N);
#define GEMM cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K, &zero, C, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
    T("warm GEMM (alone)", GEMM); T("warm GEMM 2 (alone)", GEMM); T("warm ka (alone)", (ka<<<1, 32>>>(q)));
    fflush(stdout); usleep(2500000);
    T("GEMM (spinner up)", GEMM); T("ka (spinner up)", (ka<<<1, 32>>>(q))); T("first kb (spinner up)", (kb<<<1, 32>>>(q)));
    return 0;
  }
  float *p = nullptr; void *big = nullptr;
  T("context (cudaFree 0)", cudaFree(0));
  T("cudaMalloc 4 KiB", cudaMalloc(&p, 4096));
  T("first launch ka (lazy)", (ka<<<1, 32>>>(p)));
  T("second launch ka", (ka<<<1, 32>>>(p)));
  T("first launch kb (lazy)", (kb<<<1, 32>>>(p)));
  T("cudaMalloc 64 MiB", cudaMalloc(&big, 64 << 20));
  T("cudaMemset 64 MiB", cudaMemset(big, 0, 64 << 20));  // legacy stream: a standalone probe; nothing else runs in its context
  cublasHandle_t h;
  T("cublasCreate", cublasCreate(&h));
  const int M = 16, N = 1024, K = 4096;
  __nv_bfloat16 *A, *B, *C;
  cudaMalloc(&A, sizeof(*A) * M * K); cudaMalloc(&B, sizeof(*B) * K * N); cudaMalloc(&C, sizeof(*C) * M * N);
  float one = 1.f, zero = 0.f;
  for (int i = 0; i < 3; i++)
    T(i == 0 ? "first GEMM 16x1024x4096" : i == 1 ? "second GEMM" : "third GEMM",
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K, &zero, C,
                   CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  cudaStream_t s; T("cudaStreamCreate", cudaStreamCreate(&s));
  cudaEvent_t ev; T("cudaEventCreate", cudaEventCreate(&ev));
  return 0;
}
