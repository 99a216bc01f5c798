/* Open MPI peer of bench/collectives_bench.cc: the same collectives, sizes
 * and timing loop through MPI, for a side-by-side comparison in one run.
 * Not a build dependency of tpx: //bench:collectives compiles it with
 * Debian's `mpicc` (libopenmpi-dev) when it runs, and starts it with mpirun.
 *
 *   mpicc -O2 collectives_mpi.c -o collectives_mpi
 *   mpirun -np 2 ./collectives_mpi --ops=all_reduce,all_gather --sizes=4096,1048576 --reps=7
 *   {"hosts_seen":1}
 *   {"op":"all_reduce","bytes":4096,"time_us":1.23,"best_us":1.19}
 *
 * `bytes` means what it means in the tpx bench (nccl-tests' sizes): the
 * whole f32 buffer of all_reduce, the gathered output of all_gather, the
 * scattered input of reduce_scatter. Rank 0 prints one line per (op, size):
 * the median over --reps repetitions of the mean time of `iters` back-to-back
 * operations, each repetition started by a barrier, and the fastest one.
 *
 * Every op and size uses the start of one send and one receive buffer of
 * the largest size, from malloc, or with --huge_pages mapped at a 2 MiB
 * boundary and marked for transparent huge pages (as tpx's CPU allocator
 * maps its blocks of 2 MiB and more). --rewrite_send writes the part of the
 * send buffer an op reads before each op, inside the timed loop, as the
 * tpx bench does with the same flag. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { kHugePageBytes = 2 << 20 };

typedef struct {
  float* data;
  void* map; /* the mapping to unmap, or NULL if data came from malloc */
  size_t map_bytes;
} Buffer;

/* A buffer of `bytes` filled with `value`; data is NULL when out of memory. */
static Buffer NewBuffer(long long bytes, float value, int huge_pages) {
  Buffer b = {NULL, NULL, 0};
  if (bytes < 4) bytes = 4;
  if (huge_pages && bytes >= kHugePageBytes) {
    b.map_bytes = (size_t)bytes + kHugePageBytes;
    b.map = mmap(NULL, b.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b.map == MAP_FAILED) {
      b.map = NULL;
      return b;
    }
    const uintptr_t aligned =
        ((uintptr_t)b.map + kHugePageBytes - 1) & ~(uintptr_t)(kHugePageBytes - 1);
    b.data = (float*)aligned;
    madvise(b.data, (size_t)bytes, MADV_HUGEPAGE);
  } else {
    b.data = malloc((size_t)bytes);
  }
  if (b.data != NULL) {
    for (long long i = 0; i < bytes / 4; ++i) b.data[i] = value;
  }
  return b;
}

static void FreeBuffer(Buffer b) {
  if (b.map != NULL) {
    munmap(b.map, b.map_bytes);
  } else {
    free(b.data);
  }
}

static int CompareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Same iteration count as the tpx bench: enough to dwarf the clock. */
static int ItersFor(long long bytes) {
  long long iters = (8ll << 20) / bytes;
  if (iters < 1) iters = 1;
  if (iters > 500) iters = 500;
  return (int)iters;
}

/* The f32 elements `op` of size `bytes` reads from its send buffer. */
static long long SendElements(const char* op, long long bytes, int world) {
  const long long total = bytes / 4;
  return strcmp(op, "all_gather") == 0 ? total / world : total;
}

/* Writes the first `n` elements of `send` (a value that changes each time,
 * small integers: sums stay exact). */
static void RewriteSend(float* send, long long n, int it) {
  const float value = (float)(1 + (it & 7));
  for (long long i = 0; i < n; ++i) send[i] = value;
}

static int RunOne(const char* op, long long bytes, int world, float* send, float* recv) {
  const int total = (int)(bytes / 4);
  if (strcmp(op, "all_reduce") == 0) {
    return MPI_Allreduce(send, recv, total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  if (strcmp(op, "all_gather") == 0) {
    return MPI_Allgather(send, total / world, MPI_FLOAT, recv, total / world, MPI_FLOAT,
                         MPI_COMM_WORLD);
  }
  if (strcmp(op, "reduce_scatter") == 0) {
    return MPI_Reduce_scatter_block(send, recv, total / world, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
  }
  return -1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  char ops[512] = "all_reduce,all_gather,reduce_scatter";
  char sizes[512] = "4096,1048576";
  int reps = 7;
  int huge_pages = 0;
  int rewrite_send = 0;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--ops=", 6) == 0) {
      snprintf(ops, sizeof(ops), "%s", argv[i] + 6);
    } else if (strncmp(argv[i], "--sizes=", 8) == 0) {
      snprintf(sizes, sizeof(sizes), "%s", argv[i] + 8);
    } else if (strcmp(argv[i], "--huge_pages") == 0) {
      huge_pages = 1;
    } else if (strcmp(argv[i], "--rewrite_send") == 0) {
      rewrite_send = 1;
    } else if (strncmp(argv[i], "--reps=", 7) == 0) {
      reps = atoi(argv[i] + 7);
      if (reps < 1) reps = 1;
    } else {
      if (rank == 0) fprintf(stderr, "collectives_mpi: unknown argument %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  long long max_bytes = 0;
  for (char* p = sizes; *p != '\0';) {
    char* end = NULL;
    long long b = strtoll(p, &end, 10);
    if (end == p) break;
    if (b > max_bytes) max_bytes = b;
    p = (*end == ',') ? end + 1 : end;
  }
  Buffer send = NewBuffer(max_bytes, 1.0f, huge_pages);
  Buffer recv = NewBuffer(max_bytes, 0.0f, huge_pages);
  double* per_op_us = malloc(sizeof(double) * reps);
  if (send.data == NULL || recv.data == NULL || per_op_us == NULL) MPI_Abort(MPI_COMM_WORLD, 1);

  /* How many distinct hosts the ranks run on, so that a cross-host run can
   * check its placement: {"hosts_seen":2}. */
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int name_len = 0;
  MPI_Get_processor_name(name, &name_len);
  char* names = malloc((size_t)world * MPI_MAX_PROCESSOR_NAME);
  if (names == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  int hosts_seen = 0;
  for (int i = 0; i < world; ++i) {
    int first = 1;
    for (int j = 0; j < i && first; ++j) {
      first = strcmp(names + (size_t)i * MPI_MAX_PROCESSOR_NAME,
                     names + (size_t)j * MPI_MAX_PROCESSOR_NAME) != 0;
    }
    hosts_seen += first;
  }
  free(names);
  if (rank == 0) printf("{\"hosts_seen\":%d}\n", hosts_seen);

  char* save_op = NULL;
  for (char* op = strtok_r(ops, ",", &save_op); op != NULL; op = strtok_r(NULL, ",", &save_op)) {
    for (char* p = sizes; *p != '\0';) {
      char* end = NULL;
      const long long bytes = strtoll(p, &end, 10);
      if (end == p) break;
      p = (*end == ',') ? end + 1 : end;
      const int iters = ItersFor(bytes);
      const long long send_elements = SendElements(op, bytes, world);
      for (int rep = -1; rep < reps; ++rep) { /* rep -1 warms up */
        MPI_Barrier(MPI_COMM_WORLD);
        const double start = MPI_Wtime();
        for (int it = 0; it < iters; ++it) {
          if (rewrite_send) RewriteSend(send.data, send_elements, it);
          if (RunOne(op, bytes, world, send.data, recv.data) != MPI_SUCCESS) {
            fprintf(stderr, "collectives_mpi: %s of %lld bytes failed\n", op, bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
          }
        }
        if (rep >= 0) per_op_us[rep] = (MPI_Wtime() - start) * 1e6 / iters;
      }
      qsort(per_op_us, reps, sizeof(double), CompareDoubles);
      if (rank == 0) {
        printf("{\"op\":\"%s\",\"bytes\":%lld,\"time_us\":%.3f,\"best_us\":%.3f}\n", op,
               bytes, per_op_us[reps / 2], per_op_us[0]);
        fflush(stdout);
      }
    }
  }
  free(per_op_us);
  FreeBuffer(recv);
  FreeBuffer(send);
  MPI_Finalize();
  return 0;
}
