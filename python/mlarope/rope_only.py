# SPDX-License-Identifier: Apache-2.0
"""kv_split and kv_split_backward (docs/semantics.md §4) for an adapter of a library that has
only a rope: ``class MyAdapter(KvSplitByRope)`` with two methods,

- ``_pe_view(call, array)``: the library's tensor view of a harness array whose last dimension
  is the rope slice (``k_pe``, ``key[..., k:]``, ...), its heads along ``heads_dim``;
- ``_rotate_pe(call, x, backward)``: ``x`` (one head) rotated by the library, forward or
  backward (its adjoint), returned as a tensor of ``x``'s shape,

as a user builds MLA's key from such a library: key's nope part and value copied, ``k_pe``
rotated once and expanded over the heads. The backward sums the heads' gradients of the rope
part in f32 (what autograd of that expand computes, not rounded before the rotation) and
rotates the sum back.
"""

from __future__ import annotations


def grouped_query_k_heads(heads: int) -> int:
    """How many of a rope call's ``heads`` an adapter of a kernel that rotates ``q`` and ``k``
    in one launch gives to ``k`` (the first ``heads - k`` go to ``q``): the largest divisor of
    ``heads`` at most a third of it (at least 1), so that ``q`` has a multiple of ``k``'s heads,
    as grouped-query attention does, and more heads than ``k`` from 3 heads on. 0 for fewer than
    2 heads: ``q`` takes them all (and the kernel a ``k`` the adapter makes)."""
    if heads < 2:
        return 0
    return max(d for d in range(1, max(1, heads // 3) + 1) if heads % d == 0)


class KvSplitByRope:
    heads_dim = -2  #: the heads' dimension in ``_pe_view``'s tensors

    def kv_split(self, call):
        kv, k_pe = call.inputs
        key, value = call.outputs
        k = call.k_dim
        if key.size == 0 and value.size == 0:
            return
        key[..., :k] = kv[..., :k]
        value[...] = kv[..., k:]
        if key.size == 0:
            return
        target = self._pe_view(call, key[..., k:])
        rotated = self._rotate_pe(call, self._pe_view(call, k_pe), False)
        target.copy_(rotated.expand_as(target))

    def kv_split_backward(self, call):
        grad_key, grad_value = call.inputs
        grad_kv, grad_k_pe = call.outputs
        k = call.k_dim
        if grad_kv.size == 0 and grad_k_pe.size == 0:
            return
        grad_kv[..., :k] = grad_key[..., :k]
        grad_kv[..., k:] = grad_value
        if grad_k_pe.size == 0:
            return
        grads = self._pe_view(call, grad_key[..., k:]).float()
        summed = grads.sum(dim=self.heads_dim, keepdim=True)
        self._pe_view(call, grad_k_pe).copy_(self._rotate_pe(call, summed, True))
