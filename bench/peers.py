"""Peers of `step5attn bench`, timed in the same session on the same GPU.

Run on the device machine (torch there), after the bench has written its
JSON:

    python3 bench/peers.py --ours OUT/bench.json --out OUT

Times, for the SPEC 2 reference shapes (H=64, G=8, D=192, bf16, decode, 32
requests; --batches for others), at each context that fits in memory:
  - dense decode attention through torch SDPA with the cuDNN backend and
    with the FlashAttention-2 backend (GQA, every key of the context);
  - a stock-torch composition of one CSA decode step: scores of the fp8
    summaries (dequantized to bf16) against the index queries by a cuBLAS
    matmul, weighted ReLU, torch.topk(512), a gather of the selected
    8-token regions plus the current one, then SDPA over them.
and, for one prefill chunk of 2048 and one of 8192 query tokens of one
request at the end of each context (--prefill, issue 8; --chunks picks
others):
  - dense prefill attention of the chunk against every earlier key (a
    lower-right causal mask) through torch SDPA, cuDNN and FlashAttention-2
    backends (K/V repeated to H heads), printed next to each of our prefill
    layer rows of that chunk and context (CSA and SWA, bf16 and fp8 KV,
    both selection regimes).
Each time is the median of CUDA-event-timed runs, each after a 256 MB write
that evicts the L2. Prints every peer next to our layer step (the bench's
"layer" rows, one forward call) as a ratio, writes peers.json and a plot of
decode layer-step time against context (peers.png). Also prints the device
copy bandwidth our bench measured on this GPU (its JSON's measured_copy),
the ceiling its floors are read against.
"""

import argparse
import json
import math
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, G, D, I, DI, K, R8 = 64, 8, 192, 4, 256, 512, 8
BATCHES = [32]  # decode requests; the first is the one plotted
CONTEXTS = [8192, 32768, 131072]
CHUNKS = [2048, 8192]  # prefill query tokens, as in the bench's full sweep


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


def dense_decode(ctx, backend, batch):
    q = torch.randn(batch, H, 1, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, G, ctx, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, G, ctx, D, device="cuda", dtype=torch.bfloat16)

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


def stock_csa_decode(ctx, batch):
    c = ctx // R8  # closed regions of the decode row
    try:
        q = torch.randn(batch, H, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, G, ctx, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, G, ctx, D, device="cuda", dtype=torch.bfloat16)
        summaries = torch.randn(batch, c, DI, device="cuda").to(torch.float8_e4m3fn)
        index_query = torch.randn(batch, G * I, DI, device="cuda", dtype=torch.bfloat16)
        index_weight = torch.rand(batch, G, I, device="cuda")
    except RuntimeError as e:  # out of memory at large batch x context
        print(f"  stock-torch CSA: {str(e).splitlines()[0][:120]}")
        torch.cuda.empty_cache()
        return None
    offsets = torch.arange(R8, device="cuda")
    current = (ctx - 1) // R8

    def run():
        s = torch.bmm(index_query, summaries.to(torch.bfloat16).transpose(1, 2))  # [B, G*I, C]
        s = F.relu(s.float()).view(batch, G, I, c)
        scores = (s * index_weight.unsqueeze(-1)).sum(2)  # [B, G, C]
        regions = torch.topk(scores, K, dim=-1).indices  # [B, G, K]
        cur = torch.full((batch, G, 1), current, device="cuda", dtype=regions.dtype)
        tokens = (torch.cat([regions, cur], -1).unsqueeze(-1) * R8 + offsets).flatten(2)
        idx = tokens.unsqueeze(-1).expand(-1, -1, -1, D)
        ks = torch.gather(k, 2, idx)
        vs = torch.gather(v, 2, idx)
        F.scaled_dot_product_attention(q, ks, vs, enable_gqa=True)

    try:
        return median_ms(run)
    except RuntimeError as e:  # out of memory in the gather
        print(f"  stock-torch CSA: {str(e).splitlines()[0][:120]}")
        return None
    finally:
        del q, k, v, summaries
        torch.cuda.empty_cache()


def dense_prefill(ctx, chunk, backend):
    """One chunk of `chunk` query tokens at the end of a ctx-token sequence."""
    from torch.nn.attention.bias import causal_lower_right

    q = torch.randn(1, H, chunk, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, H, ctx, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, H, ctx, D, device="cuda", dtype=torch.bfloat16)
    mask = causal_lower_right(chunk, ctx)

    def run():
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    try:
        return median_ms(run)
    except RuntimeError as e:  # the backend refuses the shape or the mask
        print(f"  prefill {backend}: {str(e).splitlines()[0][:120]}")
        return None
    finally:
        del q, k, v
        torch.cuda.empty_cache()


def ours_rows(paths, layer, phase, batch, query_len, regime, kv="bf16"):
    """Our layer rows of the bench JSONs, by context."""
    out = {}
    for path in paths:
        with open(path) as f:
            rows = json.load(f)["results"]
        for r in rows:
            if (r["op"], r["layer"], r["kv"], r["phase"], r["batch"], r["query_len"],
                    r["regime"]) == ("layer", layer, kv, phase, batch, query_len, regime):
                out[r["context"]] = r["ms"]
    return out


def prefill_peers_of_chunk(chunk):
    """Dense prefill of one chunk at each context that holds it, by backend."""
    prefill = {"dense cuDNN prefill (SDPA)": {}, "dense FA2 prefill (SDPA)": {}}
    for ctx in CONTEXTS:
        if ctx < chunk:
            continue
        prefill["dense cuDNN prefill (SDPA)"][ctx] = dense_prefill(
            ctx, chunk, SDPBackend.CUDNN_ATTENTION)
        prefill["dense FA2 prefill (SDPA)"][ctx] = dense_prefill(
            ctx, chunk, SDPBackend.FLASH_ATTENTION)
    return prefill


def our_prefill_rows(paths, chunk):
    """Our prefill layer rows of one chunk size, by 'layer kv regime'."""
    out = {}
    for layer in ("csa", "swa"):
        for kv in ("bf16", "fp8_e4m3"):
            for regime in ("independent", "correlated"):
                mine = ours_rows(paths, layer, "prefill", 1, chunk, regime, kv)
                if mine:
                    out[f"{layer} layer, {kv} KV, {regime}"] = mine
    return out


def measured_copy(paths):
    """The device copy the bench measured (bytes/s; None where its JSON has
    none: older benches, or not measured), from the first JSON that says."""
    for path in paths:
        with open(path) as f:
            copy = json.load(f).get("measured_copy") or {}
        if copy.get("bytes_per_s"):
            return copy["bytes_per_s"]
    return None


def ours_by_context(paths, batch):
    return ours_rows(paths, "csa", "decode", batch, 1, "independent")


def decode_peers(batch):
    """Dense decode (cuDNN, FA2) and the stock-torch CSA step, by context."""
    peers = {"dense cuDNN (SDPA)": {}, "dense FA2 (SDPA)": {}, "stock-torch CSA": {}}
    for ctx in CONTEXTS:
        peers["dense cuDNN (SDPA)"][ctx] = dense_decode(ctx, SDPBackend.CUDNN_ATTENTION, batch)
        peers["dense FA2 (SDPA)"][ctx] = dense_decode(ctx, SDPBackend.FLASH_ATTENTION, batch)
        peers["stock-torch CSA"][ctx] = stock_csa_decode(ctx, batch)
    return peers


def print_table(title, ours, peers):
    print(title)
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


def plot(path, ours, peers, batch):
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
    ax.set_xlabel(f"context (tokens), decode, {batch} requests")
    ax.set_ylabel("ms per layer step")
    ax.set_title(f"{torch.cuda.get_device_name()}: H=64 G=8 D=192, bf16")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", required=True, nargs="+",
                        help="bench JSON(s) of step5attn bench")
    parser.add_argument("--out", default=".", help="folder for peers.json and peers.png")
    parser.add_argument("--prefill", action="store_true",
                        help="also time dense prefill of one chunk per --chunks size")
    parser.add_argument("--chunks", type=int, nargs="+", default=CHUNKS,
                        help="prefill chunk sizes (query tokens), default %(default)s")
    parser.add_argument("--batches", type=int, nargs="+", default=BATCHES,
                        help="decode batch sizes (requests), the first plotted; default "
                        "%(default)s")
    parser.add_argument("--no-decode", action="store_true", help="skip the decode peers")
    args = parser.parse_args()
    print(f"peers on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    copy = measured_copy(args.ours)
    if copy:
        print(f"device copy measured by our bench: {copy / 1e12:.2f} TB/s")
    by_batch = {}
    for batch in ([] if args.no_decode else args.batches):
        ours_b = ours_by_context(args.ours, batch)
        peers_b = decode_peers(batch)
        print_table(f"decode, {batch} requests, our CSA layer:", ours_b, peers_b)
        by_batch[batch] = {"ours_layer_ms": ours_b, "peers_ms": peers_b}
    # The first batch keeps the keys earlier peers.json files have.
    batch = args.batches[0]
    if batch in by_batch:
        ours, peers = by_batch[batch]["ours_layer_ms"], by_batch[batch]["peers_ms"]
    else:
        ours, peers = ours_by_context(args.ours, batch), {}
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "batch": batch, "ours_layer_ms": ours, "peers_ms": peers,
              "decode_by_batch": by_batch, "ours_measured_copy_bytes_per_s": copy}
    if args.prefill:
        ours_prefill, prefill_peers = {}, {}
        for chunk in args.chunks:
            prefill = prefill_peers_of_chunk(chunk)
            for name, by_ctx in prefill.items():
                prefill_peers[f"{name}, {chunk} rows"] = by_ctx
            for mine_key, mine in our_prefill_rows(args.ours, chunk).items():
                print_table(f"prefill chunk of {chunk}, our {mine_key}:", mine, prefill)
                ours_prefill[f"{mine_key}, {chunk} rows"] = mine
        result.update(prefill_chunks=args.chunks, ours_prefill_ms=ours_prefill,
                      prefill_peers_ms=prefill_peers)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump(result, f, indent=1)
    if not args.no_decode:
        plot(os.path.join(args.out, "peers.png"), ours, peers, batch)
        if not math.isfinite(sum(ours.values() or [0.0])):
            raise SystemExit("our bench JSON holds no finite CSA layer decode rows")


if __name__ == "__main__":
    main()
