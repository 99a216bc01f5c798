/* The C ABI between tpx and its communication backends (plugins).
 *
 * A backend is a shared object `libtpx_comm_<name>.so` that exports one
 * symbol, TPX_COMM_PLUGIN_ENTRY_SYMBOL, a function returning a pointer to a
 * static plugin struct. The struct starts with tpx_comm_plugin_header_t; the
 * host checks magic and abi_version before it reads anything else.
 *
 * Rules for changing this file:
 *  - A published struct is never edited. New fields or functions go into a new
 *    struct with a `_v2` suffix and a bumped TPX_COMM_PLUGIN_ABI_VERSION; the
 *    host keeps reading older versions.
 *  - Argument structs start with `struct_size` so a reader can tell how much
 *    the writer filled in.
 *  - C types only. Enum values are fixed forever.
 *
 * The host validates every argument (counts, displacements, roots, dtypes,
 * buffer sizes) before calling a plugin; plugins may assume valid input.
 * Threading: the host serialises calls per communicator (post, comm_split,
 * comm_destroy) but may call test/wait/free on requests from any thread.
 */
#ifndef TPX_COMM_PLUGIN_ABI_H_
#define TPX_COMM_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TPX_COMM_PLUGIN_MAGIC 0x43585054u /* "TPXC" little-endian */
#define TPX_COMM_PLUGIN_ABI_VERSION 3u
/* The oldest version the host still reads. */
#define TPX_COMM_PLUGIN_ABI_VERSION_MIN 1u
#define TPX_COMM_PLUGIN_ENTRY_SYMBOL "tpx_comm_plugin_entry"

/* tpx::DType (core/dtype.h) has the same numbering; comm/plugin_host/plugin_communicator.cc
 * static_asserts it, like the other host-side twins of the enums below. */
typedef enum {
  TPX_DTYPE_F32 = 0,
  TPX_DTYPE_BF16 = 1,
  TPX_DTYPE_F16 = 2,
  TPX_DTYPE_I32 = 3,
  TPX_DTYPE_I64 = 4,
  TPX_DTYPE_BOOL = 5
} tpx_dtype_t;

typedef enum {
  TPX_REDUCE_SUM = 0,
  TPX_REDUCE_AVG = 1,
  TPX_REDUCE_MAX = 2,
  TPX_REDUCE_MIN = 3,
  TPX_REDUCE_PROD = 4
} tpx_reduce_op_t;

/* absl::StatusCode numbering (static_asserted in comm/store/store_abi.cc). */
typedef enum {
  TPX_OK = 0,
  TPX_ERR_INVALID_ARGUMENT = 3,
  TPX_ERR_DEADLINE_EXCEEDED = 4,
  TPX_ERR_FAILED_PRECONDITION = 9,
  TPX_ERR_ABORTED = 10,
  TPX_ERR_UNIMPLEMENTED = 12,
  TPX_ERR_INTERNAL = 13,
  TPX_ERR_UNAVAILABLE = 14
} tpx_status_code_t;

/* Filled by a plugin when a call fails: a human-readable reason. */
typedef struct {
  char message[1024];
} tpx_error_t;

/* Rendezvous key-value store, provided by the host (comm/store/store.h). Keys are
 * NUL-terminated; values are bytes. All functions return a tpx_status_code_t. */
typedef struct {
  uint32_t struct_size;
  void* ctx;
  int (*set)(void* ctx, const char* key, const void* value, size_t len, tpx_error_t* err);
  /* Waits up to timeout_ms for `key`; copies at most `capacity` bytes, sets *len
   * to the value's full length (FAILED_PRECONDITION if it exceeds capacity). */
  int (*get)(void* ctx, const char* key, void* value, size_t capacity, size_t* len,
             int64_t timeout_ms, tpx_error_t* err);
  /* Atomically adds delta to the integer stored at key (0 if absent). */
  int (*add)(void* ctx, const char* key, int64_t delta, int64_t* result, tpx_error_t* err);
} tpx_store_v1_t;

typedef struct {
  uint32_t struct_size;
  int32_t rank;
  int32_t size;
  /* Unique name of this communicator; prefix every store key with it. */
  const char* name;
  /* No operation may block longer than this; a stalled or dead peer makes the
   * pending operation fail with DEADLINE_EXCEEDED or UNAVAILABLE. */
  int64_t timeout_ms;
  /* CUDA device ordinal for device backends, -1 for host memory backends. */
  int32_t device;
  const tpx_store_v1_t* store;
} tpx_comm_config_v1_t;

typedef enum {
  TPX_COLL_ALL_REDUCE = 0,
  TPX_COLL_BROADCAST = 1,
  TPX_COLL_REDUCE = 2,
  TPX_COLL_ALL_GATHER_V = 3,
  TPX_COLL_REDUCE_SCATTER_V = 4,
  TPX_COLL_GATHER_V = 5,
  TPX_COLL_SCATTER_V = 6,
  TPX_COLL_ALL_TO_ALL_V = 7,
  TPX_COLL_SEND = 8,
  TPX_COLL_RECV = 9,
  TPX_COLL_BARRIER = 10
} tpx_coll_kind_t;

/* One operation. Counts and displacements are in elements of `dtype`.
 *  ALL_REDUCE, BROADCAST, REDUCE: `count` elements from send to recv
 *    (send == recv means in place; BROADCAST uses recv only, on every rank).
 *  ALL_GATHER_V: send holds recv_counts[rank] elements; recv gets rank r's
 *    block at recv_displs[r].
 *  REDUCE_SCATTER_V: send holds every rank's block (send_counts/send_displs);
 *    recv gets the reduction of block `rank` (send_counts[rank] elements).
 *  GATHER_V / SCATTER_V: like ALL_GATHER_V / an unreduced scatter, at `peer`
 *    (the root); the root's per-rank layout is recv_* / send_* respectively.
 *  ALL_TO_ALL_V: send_counts[j] elements at send_displs[j] go to rank j;
 *    recv_counts[j] elements from rank j land at recv_displs[j].
 *  SEND / RECV: `count` elements to/from `peer`, matched by `tag`.
 * Per-rank arrays have `size` entries and are only valid during post(). */
typedef struct {
  uint32_t struct_size;
  tpx_coll_kind_t kind;
  tpx_dtype_t dtype;
  tpx_reduce_op_t op;
  int32_t peer; /* root for rooted collectives, peer for send/recv */
  int32_t tag;
  const void* send;
  void* recv;
  int64_t count;
  const int64_t* send_counts;
  const int64_t* send_displs;
  const int64_t* recv_counts;
  const int64_t* recv_displs;
  /* Host-assigned sequence number of this collective on this communicator. */
  uint64_t seq;
  /* cudaStream_t the caller works on (device backends): the operation
   * starts after the work queued there. NULL for host memory (device
   * backends then order after the legacy default stream). */
  void* stream;
} tpx_coll_args_v1_t;

typedef struct tpx_comm_s* tpx_comm_t;
typedef struct tpx_request_s* tpx_request_t;

typedef struct {
  uint32_t struct_size;
  uint32_t magic;
  uint32_t abi_version;
  const char* name;    /* backend name, e.g. "ucx" */
  const char* version; /* backend's own version string, for messages */
} tpx_comm_plugin_header_t;

typedef struct {
  tpx_comm_plugin_header_t header;
  /* Called once after loading; fails if the backend cannot run here (e.g. no
   * GPU visible). */
  int (*init)(tpx_error_t* err);
  /* Collective over all `config->size` ranks: every rank calls it. */
  int (*comm_create)(const tpx_comm_config_v1_t* config, tpx_comm_t* out, tpx_error_t* err);
  /* Collective over the parent: every parent rank calls it. The host has
   * already grouped ranks: this rank becomes `config->rank` of
   * `config->size`, whose members are parent ranks `members[0..size)`. A rank
   * with color < 0 does not call it. `color` and `key` are passed for
   * backends with a native split. */
  int (*comm_split)(tpx_comm_t parent, int32_t color, int32_t key, const int32_t* members,
                    const tpx_comm_config_v1_t* config, tpx_comm_t* out, tpx_error_t* err);
  int (*comm_destroy)(tpx_comm_t comm, tpx_error_t* err);
  /* Starts an operation. Operations on one communicator complete in post order. */
  int (*post)(tpx_comm_t comm, const tpx_coll_args_v1_t* args, tpx_request_t* out,
              tpx_error_t* err);
  /* *done = 1 once finished; the return value is then the operation's status. */
  int (*test)(tpx_request_t request, int* done, tpx_error_t* err);
  /* Blocks up to timeout_ms (negative: until done). DEADLINE_EXCEEDED when
   * still running; the operation itself continues. */
  int (*wait)(tpx_request_t request, int64_t timeout_ms, tpx_error_t* err);
  /* Device backends: makes `stream` (a cudaStream_t on the communicator's
   * device) wait for the operation without blocking the host. NULL for host
   * backends. This is the capability flag: the host passes device memory
   * (CUDA tensors, with tpx_coll_args_v1_t.stream set to the stream their
   * producers run on) only to plugins whose stream_wait is non-NULL, and
   * host memory to every plugin. */
  int (*stream_wait)(tpx_request_t request, void* stream, tpx_error_t* err);
  void (*request_free)(tpx_request_t request);
} tpx_comm_plugin_v1_t;

/* Version 2: version 1 plus rejection notices. */
typedef struct {
  tpx_comm_plugin_v1_t v1; /* v1.header.abi_version == 2 */
  /* The host rejected, on this rank, the collective `args` describes (its
   * arguments failed validation here; `args` carries the kind and seq, its
   * buffers may be invalid). The operation takes its place in post order
   * without touching memory; the backend tells the peers, whose matching
   * operation then fails with `reason` instead of waiting for this rank
   * (unless they rejected it too). Errors concern only the notification. */
  int (*reject)(tpx_comm_t comm, const tpx_coll_args_v1_t* args, const char* reason,
                tpx_error_t* err);
} tpx_comm_plugin_v2_t;

/* Log severities; tpx::LogSeverity (core/log.h) has the same numbering
 * (static_asserted in comm/plugin_host/plugin_loader.cc). There is no fatal level: a
 * plugin reports failures as status codes and never ends the process. */
typedef enum {
  TPX_LOG_INFO = 0,
  TPX_LOG_WARNING = 1,
  TPX_LOG_ERROR = 2
} tpx_log_level_t;

/* What the host offers a plugin (version 3 and later). The struct and its
 * functions stay valid until the process ends; any thread may call them. */
typedef struct {
  uint32_t struct_size;
  void* ctx;
  /* Writes one line to the host's log (core/log.h), which adds the severity,
   * the rank and `file`:`line` (the plugin's source location, may be NULL). */
  void (*log)(void* ctx, tpx_log_level_t level, const char* file, int line, const char* message);
} tpx_host_v1_t;

/* Version 3: version 2 plus host services. */
typedef struct {
  tpx_comm_plugin_v2_t v2; /* v2.v1.header.abi_version == 3; v2.reject may be NULL */
  /* Called once after loading by a host that reads version 3, instead of
   * v1.init (which stays for older hosts). `host` is the host's services;
   * otherwise like v1.init. */
  int (*init_with_host)(const tpx_host_v1_t* host, tpx_error_t* err);
} tpx_comm_plugin_v3_t;

/* The one exported symbol. `host_abi_version` is the newest version the host
 * reads; the plugin returns its newest struct not newer than that, or NULL. */
typedef const tpx_comm_plugin_header_t* (*tpx_comm_plugin_entry_fn)(uint32_t host_abi_version);

#ifdef __cplusplus
}
#endif

#endif /* TPX_COMM_PLUGIN_ABI_H_ */
