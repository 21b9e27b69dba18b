/* The fused all-reduce + residual add + RMSNorm's rules at the level of tensors (symmem.h,
 * symmem_all_reduce_add_rmsnorm_check): the one description that the PyTorch op library
 * (python/csrc/symmem_torch.cpp) and the Python fake kernels (python/symmem/torch/_ops.py) both check
 * with, so that tracing and running reject the same calls in the same words. The call itself checks its
 * pointers in fused.c; tensors add what pointers cannot say: shapes, and dtypes that must agree. Pure. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "symmem/symmem.h"

static symmem_status_t broken(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static symmem_status_t broken(char *msg, size_t len, const char *fmt, ...)
{
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return SYMMEM_INVALID_ARGUMENT;
}

/* "[5, 4096]" */
static const char *shape_text(const symmem_tensor_desc_t *t, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < t->ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (at < len) snprintf(buf + at, len - at, "]");
    return buf;
}

static int same_shape(const symmem_tensor_desc_t *a, const symmem_tensor_desc_t *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static uint64_t numel(const symmem_tensor_desc_t *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d] > 0 ? (uint64_t)t->shape[d] : 0;
    return n;
}

/* Whether two tensors share a byte (of the same storage and intersecting byte ranges). */
static int overlap(const symmem_tensor_desc_t *a, const symmem_tensor_desc_t *b)
{
    if (!a || !b || a->storage != b->storage) return 0;
    const uint64_t na = numel(a) * symmem_dtype_size(a->dtype), nb = numel(b) * symmem_dtype_size(b->dtype);
    return na && nb && a->offset < b->offset + nb && b->offset < a->offset + na;
}

static const char *dtype_text(const symmem_tensor_desc_t *t)
{
    return t->dtype_name ? t->dtype_name : symmem_dtype_name(t->dtype);
}

symmem_status_t symmem_all_reduce_add_rmsnorm_check(const symmem_tensor_desc_t *input,
                                                    const symmem_tensor_desc_t *residual,
                                                    const symmem_tensor_desc_t *weight,
                                                    const symmem_tensor_desc_t *out, int writes_input, double eps,
                                                    size_t *tokens, size_t *hidden, char *msg, size_t msg_len)
{
    char sa[160], sb[160];
    const symmem_tensor_desc_t *const operand[4] = {input, residual, weight, out};
    static const char *const name[4] = {"input", "residual", "weight", "out"};
    for (int i = 0; i < 4; i++) {
        const symmem_tensor_desc_t *t = operand[i];
        if (!t) {
            if (i == 3) continue; /* out is optional */
            return broken(msg, msg_len, "%s is missing", name[i]);
        }
        if (symmem_dtype_size(t->dtype) == 0)
            return broken(msg, msg_len, "%s has dtype %s: use bfloat16, float16 or float32", name[i], dtype_text(t));
        if (t->ndim < 0 || (t->ndim > 0 && !t->shape))
            return broken(msg, msg_len, "%s has no shape (%d dimensions)", name[i], t->ndim);
    }
    for (int i = 1; i < 4; i++)
        if (operand[i] && operand[i]->dtype != input->dtype)
            return broken(msg, msg_len, "%s has dtype %s but input has dtype %s: they must match", name[i],
                          dtype_text(operand[i]), dtype_text(input));
    const int64_t h = input->ndim >= 1 ? input->shape[input->ndim - 1] : 0;
    if (input->ndim < 1 || h < 1 || h > SYMMEM_RMSNORM_MAX_HIDDEN)
        return broken(msg, msg_len,
                      "input has shape %s: it must be [tokens, hidden] (or [..., hidden]) with 1 <= hidden <= %d "
                      "(SYMMEM_RMSNORM_MAX_HIDDEN: a row is normalised in one thread block)",
                      shape_text(input, sa, sizeof sa), SYMMEM_RMSNORM_MAX_HIDDEN);
    for (int i = 1; i < 4; i += 2) /* residual, out */
        if (operand[i] && !same_shape(operand[i], input))
            return broken(msg, msg_len, "%s has shape %s but input has shape %s: they must match", name[i],
                          shape_text(operand[i], sa, sizeof sa), shape_text(input, sb, sizeof sb));
    if (weight->ndim != 1 || weight->shape[0] != h)
        return broken(msg, msg_len, "weight has shape %s: it must be [%lld], input's last dimension",
                      shape_text(weight, sa, sizeof sa), (long long)h);
    const float eps32 = (float)eps; /* what the kernel computes with */
    if (!(isfinite(eps32) && eps32 >= 0.0f))
        return broken(msg, msg_len, "eps %g must be finite (as a float32) and >= 0", eps);
    if (overlap(residual, input)) return broken(msg, msg_len, "residual overlaps input: pass separate tensors");
    if (overlap(out, residual))
        return broken(msg, msg_len,
                      "out overlaps residual: residual is updated in place, so out must be another tensor");
    if (overlap(out, input))
        return broken(msg, msg_len,
                      "out overlaps input, which this op does not write: use all_reduce_add_rmsnorm_ to write the "
                      "result into input");
    if (overlap(weight, residual) || overlap(weight, out) || (writes_input && overlap(weight, input)))
        return broken(msg, msg_len, "weight overlaps a tensor the op writes (residual or the output)");
    if (tokens) *tokens = (size_t)(numel(input) / (uint64_t)h);
    if (hidden) *hidden = (size_t)h;
    return SYMMEM_OK;
}
