/* The CUDA build of the implementation: same headers, compiled by nvcc so the kernels exist. */
#include "accel_impl.c"
