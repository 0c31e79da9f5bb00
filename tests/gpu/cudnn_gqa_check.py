# Usage (a GPU machine, the reference venv's torch): python3 tests/gpu/cudnn_gqa_check.py. Exit 0 when every
# shape passes. What model::set_cudnn_gqa(true) relies on (core/model/attention.h, docs/kernels.md).
# cuDNN attention (the ATen op odyssey calls, its backward through autograd) with grouped K/V heads
# against the same op on K/V repeated to the query heads (dK/dV summed back in fp32), both against float64.
import torch, sys
torch.manual_seed(0)
aten = torch.ops.aten
def run(hq, hkv, n, d=128, dtype=torch.bfloat16):
    q0 = torch.randn(1, hq, n, d, device='cuda', dtype=dtype)
    k0 = torch.randn(1, hkv, n, d, device='cuda', dtype=dtype)
    v0 = torch.randn(1, hkv, n, d, device='cuda', dtype=dtype)
    do = torch.randn(1, hq, n, d, device='cuda', dtype=dtype)
    scale = d ** -0.5
    g = hq // hkv
    rep = lambda x: x.repeat_interleave(g, 1)
    fold = lambda t: t.reshape(1, hkv, g, n, d).sum(2, dtype=torch.float32)
    def attn(kk, vv):
        q = q0.clone().requires_grad_(); k = kk.clone().requires_grad_(); v = vv.clone().requires_grad_()
        r = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False, scale=scale)
        r[0].backward(do)
        return r[0].detach(), r[1].detach(), q.grad, k.grad, v.grad
    o_r, l_r, dq_r, dk_r, dv_r = attn(rep(k0), rep(v0)); dk_r, dv_r = fold(dk_r), fold(dv_r)
    o_g, l_g, dq_g, dk_g, dv_g = attn(k0, v0)
    qf = q0.double().requires_grad_(); kf = rep(k0).double().requires_grad_(); vf = rep(v0).double().requires_grad_()
    s = (qf @ kf.transpose(-1, -2)) * scale
    s = s.masked_fill(~torch.ones(n, n, device='cuda', dtype=torch.bool).tril(), float('-inf'))
    o = torch.softmax(s, -1) @ vf
    o.backward(do.double())
    ref = [o.detach(), qf.grad, kf.grad.reshape(1, hkv, g, n, d).sum(2), vf.grad.reshape(1, hkv, g, n, d).sum(2)]
    err = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()
    rep_e = [err(x, r) for x, r in zip((o_r, dq_r, dk_r, dv_r), ref)]
    gqa_e = [err(x, r) for x, r in zip((o_g, dq_g, dk_g, dv_g), ref)]
    lse = (l_g.float() - l_r.float()).abs().max().item()
    u = 2.0 ** -8
    ok = all(a <= 2 * b + u for a, b in zip(gqa_e, rep_e)) and lse < 1e-3 and tuple(dk_g.shape) == (1, hkv, n, d)
    print(f"hq {hq} hkv {hkv} n {n}: rel. error out/dq/dk/dv repeated {['%.2e' % x for x in rep_e]} grouped "
          f"{['%.2e' % x for x in gqa_e]}; lse diff {lse:.1e}; dK {tuple(dk_g.shape)} {dk_g.dtype}: {'ok' if ok else 'FAIL'}")
    return ok
res = []
for args in ((28, 4, 2048), (32, 8, 1536), (14, 2, 1000), (8, 8, 512)):
    try: res.append(run(*args))
    except Exception as e: print(args, 'error:', str(e)[:400]); res.append(False)
print("cudnn gqa check:", "pass" if all(res) else "FAIL"); sys.exit(0 if all(res) else 1)
