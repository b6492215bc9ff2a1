"""Peers of `step5attn bench`, timed in the same session on the same GPU.

Run on the device machine (torch there), after the bench has written its
JSON:

    python3 bench/peers.py --ours OUT/bench.json --out OUT

Times, for the SPEC 2 reference shapes (H=64, G=8, D=192, bf16, decode, 32
requests), at each context that fits in memory:
  - dense decode attention through torch SDPA with the cuDNN backend and
    with the FlashAttention-2 backend (GQA, every key of the context);
  - a stock-torch composition of one CSA decode step: scores of the fp8
    summaries (dequantized to bf16) against the index queries by a cuBLAS
    matmul, weighted ReLU, torch.topk(512), a gather of the selected
    8-token regions plus the current one, then SDPA over them.
Each time is the median of CUDA-event-timed runs, each after a 256 MB write
that evicts the L2. Prints every peer next to our CSA layer step (the
bench's "layer" row, one forward_csa call) as a ratio, writes peers.json
and a plot of layer-step time against context (peers.png).
"""

import argparse
import json
import math
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, G, D, I, DI, K, R8 = 64, 8, 192, 4, 256, 512, 8
BATCH = 32
CONTEXTS = [8192, 32768, 131072]


def median_ms(fn, reps=10, warmup=3):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(warmup + reps):
        flush.fill_(i & 0xFF)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def dense_decode(ctx, backend):
    q = torch.randn(BATCH, H, 1, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(BATCH, G, ctx, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(BATCH, G, ctx, D, device="cuda", dtype=torch.bfloat16)

    def run():
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    try:
        return median_ms(run)
    except RuntimeError as e:  # the backend refuses the shape
        print(f"  {backend}: {str(e).splitlines()[0][:120]}")
        return None
    finally:
        del q, k, v
        torch.cuda.empty_cache()


def stock_csa_decode(ctx):
    c = ctx // R8  # closed regions of the decode row
    q = torch.randn(BATCH, H, 1, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(BATCH, G, ctx, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(BATCH, G, ctx, D, device="cuda", dtype=torch.bfloat16)
    summaries = torch.randn(BATCH, c, DI, device="cuda").to(torch.float8_e4m3fn)
    index_query = torch.randn(BATCH, G * I, DI, device="cuda", dtype=torch.bfloat16)
    index_weight = torch.rand(BATCH, G, I, device="cuda")
    offsets = torch.arange(R8, device="cuda")
    current = (ctx - 1) // R8

    def run():
        s = torch.bmm(index_query, summaries.to(torch.bfloat16).transpose(1, 2))  # [B, G*I, C]
        s = F.relu(s.float()).view(BATCH, G, I, c)
        scores = (s * index_weight.unsqueeze(-1)).sum(2)  # [B, G, C]
        regions = torch.topk(scores, K, dim=-1).indices  # [B, G, K]
        cur = torch.full((BATCH, G, 1), current, device="cuda", dtype=regions.dtype)
        tokens = (torch.cat([regions, cur], -1).unsqueeze(-1) * R8 + offsets).flatten(2)
        idx = tokens.unsqueeze(-1).expand(-1, -1, -1, D)
        ks = torch.gather(k, 2, idx)
        vs = torch.gather(v, 2, idx)
        F.scaled_dot_product_attention(q, ks, vs, enable_gqa=True)

    try:
        return median_ms(run)
    finally:
        del q, k, v, summaries
        torch.cuda.empty_cache()


def ours_by_context(path):
    with open(path) as f:
        rows = json.load(f)["results"]
    out = {}
    for r in rows:
        if (r["op"], r["layer"], r["kv"], r["phase"], r["batch"], r["regime"]) == (
            "layer", "csa", "bf16", "decode", BATCH, "independent"
        ):
            out[r["context"]] = r["ms"]
    return out


def plot(path, ours, peers):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = sorted(ours)
    ax.plot(xs, [ours[x] for x in xs], "o-", label="step5 CSA layer (forward_csa)")
    for name, by_ctx in peers.items():
        pts = sorted((x, t) for x, t in by_ctx.items() if t is not None)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "s--", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens), decode, 32 requests")
    ax.set_ylabel("ms per layer step")
    ax.set_title(f"{torch.cuda.get_device_name()}: H=64 G=8 D=192, bf16")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", required=True, help="bench JSON of step5attn bench")
    parser.add_argument("--out", default=".", help="folder for peers.json and peers.png")
    args = parser.parse_args()
    ours = ours_by_context(args.ours)
    peers = {"dense cuDNN (SDPA)": {}, "dense FA2 (SDPA)": {}, "stock-torch CSA": {}}
    print(f"peers on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for ctx in CONTEXTS:
        peers["dense cuDNN (SDPA)"][ctx] = dense_decode(ctx, SDPBackend.CUDNN_ATTENTION)
        peers["dense FA2 (SDPA)"][ctx] = dense_decode(ctx, SDPBackend.FLASH_ATTENTION)
        peers["stock-torch CSA"][ctx] = stock_csa_decode(ctx)
    print(f"{'context':>8} {'ours ms':>9} " + " ".join(f"{n:>26}" for n in peers))
    for ctx in sorted(set(CONTEXTS) | set(ours)):
        mine = ours.get(ctx)
        cells = []
        for by_ctx in peers.values():
            t = by_ctx.get(ctx)
            if t is None:
                cells.append(f"{'n/a':>26}")
            elif mine:
                cells.append(f"{t:9.3f} ms ({t / mine:6.1f}x ours)")
            else:
                cells.append(f"{t:9.3f} ms{'':>15}")
        mine_s = f"{mine:9.3f}" if mine else f"{'n/a':>9}"
        print(f"{ctx // 1024:>7}K {mine_s} " + " ".join(cells))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "batch": BATCH, "ours_layer_ms": ours, "peers_ms": peers}, f, indent=1)
    plot(os.path.join(args.out, "peers.png"), ours, peers)
    if not math.isfinite(sum(ours.values() or [0.0])):
        raise SystemExit("our bench JSON holds no finite CSA layer decode rows")


if __name__ == "__main__":
    main()
