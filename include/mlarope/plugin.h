// SPDX-License-Identifier: Apache-2.0
/* The kernel plugin ABI of mlarope, version 1: how a shared library hands its own RoPE kernels
 * to the harness (`mlarope run|check|fuzz --backend plugin:PATH.so`), which then checks them
 * exactly like this repository's backends. Plain C: fixed-width types, no C++ across the
 * boundary, every struct starting with its size so that later versions can grow it.
 *
 * A plugin exports one function, named by MLAROPE_PLUGIN_ENTRY, returning a pointer to a static
 * mlarope_plugin. The harness checks struct_size and abi_version before anything else, and a
 * library without the symbol, or with another ABI version, is refused by name (exit status 2).
 *
 * The semantics of every call are those of docs/semantics.md (§2-§5), its descriptions those of
 * include/mlarope/ops.h, translated field by field. Strides are in elements. Every pointer is
 * in the memory named by `device`. A call the plugin does not compute is declined through
 * `supports` (it is then counted as not supported, never as a failure); a call it accepts and
 * computes wrongly is a failure. */
#ifndef MLAROPE_PLUGIN_H_
#define MLAROPE_PLUGIN_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MLAROPE_PLUGIN_ABI_VERSION 1u
/** The name of the one exported symbol, an mlarope_plugin_entry_fn. */
#define MLAROPE_PLUGIN_ENTRY "mlarope_plugin_entry"

enum { MLAROPE_DTYPE_F32 = 0, MLAROPE_DTYPE_F16 = 1, MLAROPE_DTYPE_BF16 = 2 };
enum { MLAROPE_INDEX_I32 = 0, MLAROPE_INDEX_I64 = 1 };
enum { MLAROPE_PAIRS_INTERLEAVED = 0, MLAROPE_PAIRS_HALF = 1 };
enum { MLAROPE_TOKENS_SBHD = 0, MLAROPE_TOKENS_THD = 1 };
enum { MLAROPE_FREQ_PER_SEQUENCE = 0, MLAROPE_FREQ_PACKED = 1 };
enum { MLAROPE_MEMORY_HOST = 0, MLAROPE_MEMORY_CUDA = 1 };
enum {
  MLAROPE_OP_ROPE = 0,             /* inputs[0] = t, outputs[0] = out */
  MLAROPE_OP_ROPE_BACKWARD = 1,    /* inputs[0] = grad_out, outputs[0] = grad_t */
  MLAROPE_OP_KV_SPLIT = 2,         /* inputs = kv, k_pe; outputs = key, value */
  MLAROPE_OP_KV_SPLIT_BACKWARD = 3 /* inputs = grad_key, grad_value; outputs = grad_kv, grad_k_pe */
};

/** A strided view: rank 2..4, shape and strides (in elements) of the first `rank` entries. */
typedef struct mlarope_tensor {
  void* data;
  int32_t dtype; /* MLAROPE_DTYPE_* */
  int32_t rank;
  int64_t shape[4];
  int64_t strides[4];
} mlarope_tensor;

/** An index array (cu_seqlens, position_ids, seq_offsets); data NULL when not given. */
typedef struct mlarope_index_array {
  const void* data;
  int32_t type; /* MLAROPE_INDEX_* */
  int32_t reserved;
  int64_t size;
} mlarope_index_array;

/** One call. In place (rope ops only): inputs[0] and outputs[0] are the same tensor, and only
 * its rope slices may be written. */
typedef struct mlarope_call {
  uint32_t struct_size; /* sizeof(mlarope_call) of the harness */
  int32_t op;           /* MLAROPE_OP_* */
  int32_t in_place;     /* 0 or 1 */
  int32_t memory;       /* MLAROPE_MEMORY_*: where every pointer of the call lives */
  mlarope_tensor inputs[2];
  mlarope_tensor outputs[2];
  int64_t nope_dim, emb_dim; /* rope ops */
  int64_t k_dim, v_dim;      /* kv ops (emb_dim too) */
  /* The rotation (docs/semantics.md §3). */
  int32_t in_layout, out_layout, table_layout; /* MLAROPE_PAIRS_* */
  int32_t inverse;
  mlarope_tensor cos, sin; /* [R, emb_dim] */
  /* Positions (docs/semantics.md §2). */
  int32_t tokens;    /* MLAROPE_TOKENS_* */
  int32_t freq_mode; /* MLAROPE_FREQ_*, THD only */
  int64_t cp_size, cp_rank, max_seqlen;
  mlarope_index_array cu_seqlens, position_ids, seq_offsets;
  uint32_t*
      status; /* optional: OR the docs/semantics.md §5 status bits in here; NULL when not asked */
  void* stream; /* MLAROPE_MEMORY_CUDA: the cudaStream_t to run on; NULL on the host */
} mlarope_call;

/** What a plugin provides. */
typedef struct mlarope_plugin {
  uint32_t struct_size; /* sizeof(mlarope_plugin) of the plugin */
  uint32_t abi_version; /* MLAROPE_PLUGIN_ABI_VERSION */
  const char* name;     /* shown in reports */
  /* MLAROPE_MEMORY_*: where the plugin wants its tensors. CUDA: the harness copies each call's
   * tensors to device memory (each at its host address's offset modulo 256, so misalignment is
   * kept) and passes a cudaStream_t; when the call returns, its work must be complete or
   * enqueued on that stream. */
  int32_t memory;
  int32_t reserved;
  /* 1: the plugin computes this call; 0: it does not, and *reason (a static string) says
   * why, e.g. "THD with inverse". NULL: every call of the ops below is supported. It decides
   * from the call's fields, shapes, strides and dtypes and reads no array: the fuzz asks it
   * before computing anything, to steer its draws, and a CUDA plugin's arrays are on the
   * device. */
  int (*supports)(const mlarope_call* call, const char** reason);
  /* One entry per op family; NULL: not provided. 0 on success; otherwise the call failed and
   * last_error() says why. */
  int (*rope)(const mlarope_call* call);              /* MLAROPE_OP_ROPE and _ROPE_BACKWARD */
  int (*kv_split)(const mlarope_call* call);          /* MLAROPE_OP_KV_SPLIT */
  int (*kv_split_backward)(const mlarope_call* call); /* MLAROPE_OP_KV_SPLIT_BACKWARD */
  const char* (*last_error)(void);                    /* may be NULL */
} mlarope_plugin;

/** The type of the exported MLAROPE_PLUGIN_ENTRY function. */
typedef const mlarope_plugin* (*mlarope_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* MLAROPE_PLUGIN_H_ */
