/* The read-bandwidth probe of tg-bench (benchmarks/decode.py: measure_bandwidth), in the manner of
 * STREAM: the threads sum their contiguous parts of a float array, vectorised (gcc -O3
 * -march=native -fopenmp), so the loop is bound by the memory stream alone. Compiled when the
 * suite runs; the NumPy and torch probes stand in where no C compiler is found. */
double tg_stream_read(const float *a, long n, int threads) {
    float total = 0.0f;
#pragma omp parallel for simd num_threads(threads) schedule(static) reduction(+ : total)
    for (long i = 0; i < n; i++) total += a[i];
    return total;
}
