"""bench/peers.py's bookkeeping without a GPU: torch is replaced by a stub
and the dense peers by a formula, so what is checked is which of our bench
rows each peer is printed next to and what peers.json records. Each prefill
chunk size is compared with the dense prefill of the same chunk and context,
CSA and SWA rows of both KV dtypes and both regimes are found, contexts
shorter than the chunk are not timed, and the ratio is peer time / ours.
Decode peers are timed per --batches size and recorded next to our CSA
decode rows of that batch; the first batch keeps peers.json's old keys.

usage: peers_tables_test.py PEERS_PY"""

import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import types


def load_peers(path):
    torch = types.ModuleType("torch")
    torch.__version__ = "stub"
    torch.cuda = types.SimpleNamespace(get_device_name=lambda: "stub GPU")
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(CUDNN_ATTENTION="cudnn", FLASH_ATTENTION="fa2")
    attention.sdpa_kernel = None
    sys.modules.update({"torch": torch, "torch.nn": types.ModuleType("torch.nn"),
                        "torch.nn.functional": types.ModuleType("torch.nn.functional"),
                        "torch.nn.attention": attention})
    spec = importlib.util.spec_from_file_location("peers", path)
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    return peers


def peer_ms(ctx, chunk, backend):
    # Distinct per (context, chunk, backend), so a mix-up shows.
    return ctx / 1024 + chunk / 100 + (0.5 if backend == "fa2" else 0.25)


def our_ms(layer, kv, regime, ctx, chunk):
    return (ctx / 8192 + chunk / 4096 + (1 if layer == "swa" else 0) + (2 if kv != "bf16" else 0)
            + (4 if regime == "correlated" else 0))


def decode_ms(ctx, batch, name):
    return ctx / 1024 * batch / 32 + {"cudnn": 0.125, "fa2": 0.25, "stock": 0.5}[name]


def check_decode(peers, bench_json, tmp, failures):
    decode_timed = []

    def dense_decode(ctx, backend, batch):
        decode_timed.append((ctx, backend, batch))
        return decode_ms(ctx, batch, backend)

    def stock_csa_decode(ctx, batch):
        decode_timed.append((ctx, "stock", batch))
        return decode_ms(ctx, batch, "stock")

    peers.dense_decode = dense_decode
    peers.stock_csa_decode = stock_csa_decode
    peers.plot = lambda *a: None
    sys.argv = ["peers.py", "--ours", bench_json, "--out", tmp, "--batches", "1", "32"]
    with contextlib.redirect_stdout(io.StringIO()):
        peers.main()
    with open(os.path.join(tmp, "peers.json")) as f:
        result = json.load(f)
    want_timed = {(c, n, b) for n in ("cudnn", "fa2", "stock") for b in (1, 32)
                  for c in (8192, 32768, 131072)}
    if set(decode_timed) != want_timed:
        failures.append(f"decode peers timed at {sorted(decode_timed)}")
    if result.get("batch") != 1 or set(result.get("decode_by_batch", {})) != {"1", "32"}:
        failures.append(f"batch {result.get('batch')}, decode_by_batch keys "
                        f"{list(result.get('decode_by_batch', {}))}")
        return
    for b in (1, 32):
        entry = result["decode_by_batch"][str(b)]
        ours = {int(c): t for c, t in entry["ours_layer_ms"].items()}
        if ours != {c: decode_ms(c, b, "stock") * 0.1 for c in (8192, 32768, 131072)}:
            failures.append(f"ours at batch {b}: {ours}")
        fa2 = {int(c): t for c, t in entry["peers_ms"]["dense FA2 (SDPA)"].items()}
        if fa2 != {c: decode_ms(c, b, "fa2") for c in (8192, 32768, 131072)}:
            failures.append(f"FA2 decode at batch {b}: {fa2}")
    if result["ours_layer_ms"] != result["decode_by_batch"]["1"]["ours_layer_ms"]:
        failures.append("ours_layer_ms is not the first batch's rows")


def main(peers_path):
    peers = load_peers(peers_path)
    timed = []

    def dense_prefill(ctx, chunk, backend):
        timed.append((ctx, chunk, backend))
        return peer_ms(ctx, chunk, backend)

    peers.dense_prefill = dense_prefill
    rows = []
    shapes = [("csa", "independent"), ("csa", "correlated"), ("swa", "independent")]
    for kv in ("bf16", "fp8_e4m3"):
        for ctx in (8192, 32768, 131072):
            for chunk in (2048, 8192):
                for layer, regime in shapes:
                    rows.append(dict(op="layer", layer=layer, kv=kv, phase="prefill", batch=1,
                                     query_len=chunk, regime=regime, context=ctx,
                                     ms=our_ms(layer, kv, regime, ctx, chunk)))
    # A row the prefill tables must not pick up (the attention op alone),
    # and the decode rows of check_decode.
    rows.append(dict(op="attention", layer="csa", kv="bf16", phase="prefill", batch=1,
                     query_len=2048, regime="independent", context=8192, ms=1e6))
    for batch in (1, 32):
        for ctx in (8192, 32768, 131072):
            rows.append(dict(op="layer", layer="csa", kv="bf16", phase="decode", batch=batch,
                             query_len=1, regime="independent", context=ctx,
                             ms=decode_ms(ctx, batch, "stock") * 0.1))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        bench_json = os.path.join(tmp, "bench.json")
        with open(bench_json, "w") as f:
            json.dump({"results": rows}, f)
        sys.argv = ["peers.py", "--ours", bench_json, "--out", tmp, "--prefill", "--no-decode",
                    "--chunks", "2048", "16384"]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            peers.main()
        with open(os.path.join(tmp, "peers.json")) as f:
            result = json.load(f)
        check_decode(peers, bench_json, tmp, failures)
    text = printed.getvalue()

    expected_timed = {(ctx, chunk, backend) for chunk in (2048, 16384)
                      for ctx in (8192, 32768, 131072) if ctx >= chunk
                      for backend in ("cudnn", "fa2")}
    if set(timed) != expected_timed or len(timed) != len(expected_timed):
        failures.append(f"dense prefill timed at {sorted(timed)}, expected {sorted(expected_timed)}")
    if result.get("prefill_chunks") != [2048, 16384]:
        failures.append(f"prefill_chunks {result.get('prefill_chunks')}, expected [2048, 16384]")
    fa2 = result["prefill_peers_ms"].get("dense FA2 prefill (SDPA), 2048 rows", {})
    if {int(c): t for c, t in fa2.items()} != {c: peer_ms(c, 2048, "fa2")
                                               for c in (8192, 32768, 131072)}:
        failures.append(f"FA2 2048-row peers recorded as {fa2}")
    ours = result["ours_prefill_ms"]
    for kv in ("bf16", "fp8_e4m3"):
        for layer, regime in shapes:
            key = f"{layer} layer, {kv} KV, {regime}, 2048 rows"
            want = {c: our_ms(layer, kv, regime, c, 2048) for c in (8192, 32768, 131072)}
            got = {int(c): t for c, t in ours.get(key, {}).items()}
            if got != want:
                failures.append(f"ours '{key}': {got}, expected {want}")
    if any(k.endswith("16384 rows") for k in ours):
        failures.append("rows of a chunk size the bench did not run were reported")
    # The table line of CSA fp8 correlated at 32K: ours, then cuDNN and FA2 as
    # peer / ours.
    mine = our_ms("csa", "fp8_e4m3", "correlated", 32768, 2048)
    cudnn, flash = peer_ms(32768, 2048, "cudnn"), peer_ms(32768, 2048, "fa2")
    title = "prefill chunk of 2048, our csa layer, fp8_e4m3 KV, correlated:"
    block = text.split(title)[1].split("prefill chunk of")[0] if title in text else ""
    if not block or f"{mine:9.3f}" not in block:
        failures.append(f"no table '{title}' with our {mine:.3f} ms in:\n{text}")
    else:
        row = [ln for ln in block.splitlines() if ln.strip().startswith("32K")][0]
        for peer in (cudnn, flash):
            cell = f"{peer:9.3f} ms ({peer / mine:6.1f}x ours)"
            if cell not in row:
                failures.append(f"32K row '{row}' lacks '{cell}'")
    for failure in failures:
        print("FAIL:", failure)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
