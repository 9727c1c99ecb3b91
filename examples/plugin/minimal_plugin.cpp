// SPDX-License-Identifier: Apache-2.0
// rope on SBHD f32 tensors, out of place, pairs in the half layout; every other call declined.
#include <mlarope/plugin.h>

static int supports(const mlarope_call* c, const char** reason) {
  *reason = "only SBHD f32 rope out of place, half layouts, no CP or offsets";
  return c->op == MLAROPE_OP_ROPE && !c->in_place && c->tokens == MLAROPE_TOKENS_SBHD &&
         c->cp_size == 1 && c->inputs[0].dtype == MLAROPE_DTYPE_F32 &&
         c->cos.dtype == MLAROPE_DTYPE_F32 && !c->seq_offsets.data &&
         c->in_layout == MLAROPE_PAIRS_HALF && c->out_layout == MLAROPE_PAIRS_HALF &&
         c->table_layout == MLAROPE_PAIRS_HALF;
}
static int rope(const mlarope_call* c) {  // row s uses table row s (docs/semantics.md §2-§4)
  const mlarope_tensor &t = c->inputs[0], &o = c->outputs[0], &cs = c->cos, &sn = c->sin;
  const int64_t n = c->nope_dim, half = c->emb_dim / 2;
  const float sg = c->inverse ? -1.0f : 1.0f;
  for (int64_t s = 0; s < t.shape[0]; ++s)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t h = 0; h < t.shape[2]; ++h) {
        const float* x =
            (const float*)t.data + s * t.strides[0] + b * t.strides[1] + h * t.strides[2];
        float* y = (float*)o.data + s * o.strides[0] + b * o.strides[1] + h * o.strides[2];
        const float *k = (const float*)cs.data + s * cs.strides[0],
                    *q = (const float*)sn.data + s * sn.strides[0];
        for (int64_t i = 0; i < n; ++i) y[i] = x[i];
        for (int64_t i = 0; i < half; ++i) {
          y[n + i] = x[n + i] * k[i] - x[n + half + i] * sg * q[i];
          y[n + half + i] = x[n + half + i] * k[half + i] + x[n + i] * sg * q[half + i];
        }
      }
  return 0;
}
static const mlarope_plugin kPlugin = {sizeof(mlarope_plugin),
                                       MLAROPE_PLUGIN_ABI_VERSION,
                                       "minimal",
                                       MLAROPE_MEMORY_HOST,
                                       0,
                                       supports,
                                       rope,
                                       0,
                                       0,
                                       0};
extern "C" const mlarope_plugin* mlarope_plugin_entry(void) { return &kPlugin; }
